"""Replay as a user sees it: `pg-shell replay` follows the run and compares
every replayed command with its original; a replay whose original image is
gone says so in its output."""

from __future__ import annotations

import json
import re

import psycopg2
import pytest

from tests.support import call

pytestmark = [pytest.mark.postgres, pytest.mark.docker]

ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(same \(\S+\)|different \(\S+\))\s+(same|different)\s+(.*)$")


def table_rows(stdout: str) -> list[tuple[str, str, str]]:
    """(exit column, output column, command) of each row of the table."""
    return [(m[3], m[4], m[5]) for line in stdout.splitlines() if (m := ROW.match(line))]


def test_replay_compares_exit_codes_and_outputs_and_exits_1_on_a_difference(alice_cli,
                                                                            metrics_daemon):
    cli, alice = alice_cli
    assert cli("run", "echo a").returncode == 0
    assert cli("run", "exit 3").returncode == 3
    assert cli("run", "date +%N").returncode == 0
    first = min(r["id"] for r in call(alice.conn, "SELECT id FROM shell.commands"))

    replay = cli("replay", alice.session_id, str(first))
    assert replay.returncode == 1, (replay.stdout, replay.stderr)
    assert table_rows(replay.stdout) == [
        ("same (0)", "same", "echo a"),
        ("same (3)", "same", "exit 3"),
        ("same (0)", "different", "date +%N"),
    ], replay.stdout
    # The differing output is shown as a short diff of the two lines.
    assert re.search(r"^\s+-\d+$", replay.stdout, re.M)
    assert re.search(r"^\s+\+\d+$", replay.stdout, re.M)
    assert replay.stdout.rstrip().endswith("2/3 commands matched")
    assert "3/3 commands done" in replay.stderr

    as_json = cli("replay", "--json", alice.session_id, str(first))
    assert as_json.returncode == 1, as_json.stderr
    body = json.loads(as_json.stdout)
    assert body["matched"] is False
    compared = [(c["command"], c["exit_code_same"], c["output_same"], c["same"])
                for c in body["commands"]]
    assert compared == [
        ("echo a", True, True, True), ("exit 3", True, True, True),
        ("date +%N", True, False, False)]
    assert [c["original_id"] for c in body["commands"]] == [first, first + 1, first + 2]
    assert all(c["replay_status"] == "done" for c in body["commands"])


def test_replay_exits_0_when_every_command_matches(alice_cli, metrics_daemon):
    cli, alice = alice_cli
    assert cli("run", "echo a > f; cat f").returncode == 0
    assert cli("run", "cat f; exit 3").returncode == 3
    first = min(r["id"] for r in call(alice.conn, "SELECT id FROM shell.commands"))
    replay = cli("replay", alice.session_id, str(first))
    assert replay.returncode == 0, (replay.stdout, replay.stderr)
    assert table_rows(replay.stdout) == [("same (0)", "same", "echo a > f; cat f"),
                                         ("same (3)", "same", "cat f; exit 3")]
    assert replay.stdout.rstrip().endswith("2/2 commands matched")


def test_a_replay_whose_original_image_is_gone_runs_on_the_current_one_and_says_so(
        db, make_tenant, metrics_daemon, sandbox_image):
    alice = make_tenant("alice")
    original = alice.run("echo hi")
    assert original["image_digest"] == sandbox_image
    gone = "sha256:" + "0" * 64
    admin = psycopg2.connect(db)
    admin.autocommit = True
    try:
        call(admin, "UPDATE shell.commands SET image_digest = %s WHERE id = %s",
             (gone, original["id"]))
    finally:
        admin.close()

    run_id = call(alice.conn, "SELECT shell_api.replay_session(%s, %s) AS id",
                  (alice.session_id, original["id"]))[0]["id"]
    replayed_id = call(alice.conn, "SELECT id FROM shell.commands WHERE replay_run_id = %s",
                       (run_id,))[0]["id"]
    replayed = alice.wait(replayed_id)
    assert (replayed["status"], replayed["exit_code"]) == ("done", 0)
    assert replayed["output"] == (
        f"[pg-shell: image {gone} no longer exists; ran on {sandbox_image}]\nhi\n")
    assert replayed["image_digest"] == sandbox_image

    rows = call(alice.conn, "SELECT * FROM shell_api.replay_comparison(%s)", (run_id,))
    assert [(r["original_image_digest"], r["replay_image_digest"], r["original_output"])
            for r in rows] == [(gone, sandbox_image, "hi\n")]


def test_a_replay_whose_original_image_exists_runs_on_it_without_a_note(make_tenant,
                                                                        metrics_daemon):
    alice = make_tenant("alice")
    original = alice.run("echo hi")
    run_id = call(alice.conn, "SELECT shell_api.replay_session(%s, %s) AS id",
                  (alice.session_id, original["id"]))[0]["id"]
    replayed_id = call(alice.conn, "SELECT id FROM shell.commands WHERE replay_run_id = %s",
                       (run_id,))[0]["id"]
    replayed = alice.wait(replayed_id)
    assert (replayed["output"], replayed["image_digest"]) == ("hi\n", original["image_digest"])


def test_replay_comparison_and_timeline_are_the_owners_only(db, make_tenant, metrics_daemon):
    alice, bob = make_tenant("alice"), make_tenant("bob")
    command = alice.run("echo mine")
    run_id = call(alice.conn, "SELECT shell_api.replay_session(%s, %s) AS id",
                  (alice.session_id, command["id"]))[0]["id"]
    rows = call(alice.conn, "SELECT * FROM shell_api.replay_comparison(%s)", (run_id,))
    assert [(r["original_id"], r["command"], r["original_output"]) for r in rows] == \
        [(command["id"], "echo mine", "mine\n")]
    assert [r["data"] for r in call(alice.conn, "SELECT * FROM shell_api.output_timeline(%s)",
                                    (command["id"],))] == ["mine\n"]
    for sql, arg in [("SELECT * FROM shell_api.replay_comparison(%s)", run_id),
                     # bob's session is not a replay:
                     ("SELECT * FROM shell_api.replay_comparison(%s)", bob.session_id),
                     ("SELECT * FROM shell_api.output_timeline(%s)", command["id"]),
                     ("SELECT * FROM shell_api.output_timeline(%s)", 10**12)]:
        with pytest.raises(psycopg2.Error) as denied:
            call(bob.conn, sql, (arg,))
        assert denied.value.pgcode == "22023", sql
