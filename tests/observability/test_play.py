"""`pg-shell play` replays a command's output with the timing it had: the
gaps are measured on the player's stdout, compared loosely with the gaps
the database recorded (never against fixed times)."""

from __future__ import annotations

import os
import select
import subprocess
import time

import pytest

from tests.observability.conftest import HANG, Cli
from tests.support import call

pytestmark = [pytest.mark.postgres, pytest.mark.docker]


def arrivals(player: subprocess.Popen[bytes], marks: list[bytes]) -> dict[bytes, float]:
    """When (monotonic) each mark first appeared on the player's stdout."""
    assert player.stdout is not None
    seen = b""
    at: dict[bytes, float] = {}
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        if not select.select([player.stdout], [], [], 1.0)[0]:
            continue
        data = os.read(player.stdout.fileno(), 65536)
        now = time.monotonic()
        if not data:
            break
        seen += data
        for mark in marks:
            if mark in seen and mark not in at:
                at[mark] = now
    assert player.wait(HANG) == 0, player.stderr.read() if player.stderr else ""
    assert seen == b"".join(marks), seen
    return at


def test_play_keeps_the_gaps_between_chunks_and_speed_0_drops_them(alice_cli, metrics_daemon):
    cli: Cli
    cli, alice = alice_cli
    assert cli("run", "echo one; sleep 1; echo two; sleep 1; echo three").returncode == 0
    command_id = call(alice.conn, "SELECT max(id) AS id FROM shell.commands")[0]["id"]
    timeline = call(alice.conn, "SELECT * FROM shell_api.output_timeline(%s)", (command_id,))
    assert [r["data"] for r in timeline] == ["one\n", "two\n", "three\n"]
    offsets = [r["offset_ms"] / 1000 for r in timeline]
    assert offsets == sorted(offsets) and offsets[0] >= 0
    recorded = [offsets[1] - offsets[0], offsets[2] - offsets[1]]
    assert min(recorded) > 0.5, timeline  # `sleep 1` apart, give or take a flush

    marks = [b"one\n", b"two\n", b"three\n"]
    at = arrivals(cli.start("play", str(command_id)), marks)
    played = [at[b"two\n"] - at[b"one\n"], at[b"three\n"] - at[b"two\n"]]
    for gap, original in zip(played, recorded):
        assert gap >= original / 2, (played, recorded)

    at = arrivals(cli.start("play", str(command_id), "--speed", "0"), marks)
    assert at[b"three\n"] - at[b"one\n"] < min(recorded) / 2, at

    at = arrivals(cli.start("play", str(command_id), "--speed", "4"), marks)
    assert at[b"three\n"] - at[b"one\n"] < sum(recorded) / 2, at


def test_play_of_another_users_command_is_not_found(alice_cli, make_tenant, metrics_daemon):
    cli, _alice = alice_cli
    bob = make_tenant("bob")
    theirs = bob.run("echo secret")
    result = cli("play", str(theirs["id"]))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("pg-shell: command not found [22023]"), result.stderr
