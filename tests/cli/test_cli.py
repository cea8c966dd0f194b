"""The headless CLI as a user runs it: `pg-shell …` subprocesses against the
real gateway and the real executor daemon (tests/fixtures_stack.py), over
a fresh database and the real Docker engine."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from tests import support
from tests.fixtures_stack import REPO, Daemon, Gateway
from tests.support import call, create_user

PASSWORD = "correct horse"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
HANG = 90  # seconds: only proves that something did not hang
SUBCOMMANDS = {
    "login": ["USERNAME", "--print-token"],
    "sessions": ["--json"],
    "new": ["NAME"],
    "run": ["COMMAND", "--session"],
    "tail": ["--session", "--follow", "--lines"],
    "cancel": ["COMMAND_ID"],
    "fork": ["COMMAND_ID"],
    "replay": ["SESSION", "START_ID"],
    "history": ["--session", "--limit", "--json"],
}


class Cli:
    """Runs `pg-shell` with its own config directory, pointed at the gateway."""

    def __init__(self, url: str, home: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
        self.env.pop("DATABASE_URL", None)  # the CLI needs nothing but the API
        self.env.update({"PG_SHELL_URL": url, "XDG_CONFIG_HOME": str(home / "config"), "HOME": str(home)})
        self.token_file = home / "config" / "pg-shell" / "token"

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "executor.cli.main", *args]

    def __call__(self, *args: str, input: str = "", env: dict[str, str] | None = None,
                 timeout: float = HANG) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), input=input, capture_output=True, text=True, check=False,
                              env={**self.env, **(env or {})}, cwd=REPO, timeout=timeout)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, bufsize=1, env=self.env, cwd=REPO)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("pg-shell: "), result.stderr
    return result.stderr.strip()


def commands(db: str) -> list[dict[str, Any]]:
    conn = psycopg2.connect(db)
    conn.autocommit = True
    try:
        return call(conn, "SELECT id, session_id, command, status, exit_code, reason, completed_at "
                          "FROM shell.commands ORDER BY id")
    finally:
        conn.close()


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    return support.wait_for(what, check, timeout=HANG)


@pytest.fixture
def user(db: str) -> str:
    return create_user(db, "alice", PASSWORD)


@pytest.fixture
def cli(gateway: Gateway, user: str, tmp_path: Path) -> Cli:
    """A CLI that is not logged in yet (the API only: no executor)."""
    return Cli(gateway.url, tmp_path)


@pytest.fixture
def logged_in(cli: Cli) -> Cli:
    assert cli("login", "alice", input=PASSWORD + "\n").returncode == 0
    return cli


@pytest.fixture
def shell(logged_in: Cli, daemon: Daemon) -> Cli:
    """Logged in, with a session, and the executor running."""
    created = logged_in("new", "main")
    assert created.returncode == 0, created.stderr
    logged_in.env["PG_SHELL_SESSION"] = created.stdout.strip()
    return logged_in


# -- login and sessions -------------------------------------------------------------


def test_login_with_the_wrong_password_fails_in_one_line_and_saves_nothing(cli):
    result = cli("login", "alice", input="wrong horse\n")
    assert one_line_error(result) == "pg-shell: invalid username or password [28P01]"
    assert not cli.token_file.exists()
    assert one_line_error(cli("sessions")).startswith("pg-shell: not logged in: run `pg-shell login")


def test_login_saves_a_private_token_that_the_other_commands_use(cli):
    result = cli("login", "alice", input=PASSWORD + "\n")
    assert (result.returncode, result.stdout) == (0, "")
    assert "logged in as alice" in result.stderr
    assert stat.S_IMODE(cli.token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli.token_file.parent.stat().st_mode) == 0o700
    assert cli("sessions", "--json").stdout.strip() == "[]"
    # --print-token hands the token to a script instead, and PG_SHELL_TOKEN is used before the file.
    printed = cli("login", "alice", "--print-token", input=PASSWORD + "\n")
    assert printed.returncode == 0 and printed.stdout.count(".") == 2
    cli.token_file.write_text("garbage\n")
    assert cli("sessions", env={"PG_SHELL_TOKEN": printed.stdout.strip()}).returncode == 0
    failed = cli("sessions")
    assert one_line_error(failed).endswith("[PGRST301] (log in again with `pg-shell login USERNAME`)")


def test_new_prints_the_id_and_sessions_lists_the_most_recent_first(logged_in):
    first = logged_in("new", "first").stdout.strip()
    second = logged_in("new").stdout.strip()
    assert UUID.match(first) and UUID.match(second)
    listed = json.loads(logged_in("sessions", "--json").stdout)
    assert {s["id"] for s in listed} == {first, second}
    assert {s["name"] for s in listed} == {"first", None}
    table = logged_in("sessions").stdout.splitlines()
    assert len(table) == 2 and all(line.startswith((first, second)) for line in table)
    assert any(line.endswith("first") for line in table)


def test_the_api_being_down_is_one_clear_line(logged_in):
    result = logged_in("sessions", env={"PG_SHELL_URL": "http://127.0.0.1:9"})
    line = one_line_error(result)
    assert line.startswith("pg-shell: cannot reach the pg_shell API at http://127.0.0.1:9")
    assert "PG_SHELL_URL" in line


def test_an_unknown_session_is_one_line_with_the_database_hint(logged_in):
    result = logged_in("run", "--session", "00000000-0000-0000-0000-000000000000", "echo hi")
    assert one_line_error(result) == ("pg-shell: session not found [22023] "
                                      "(Use an id returned by create_session or list_sessions.)")
    assert one_line_error(logged_in("history", "--session", "not-a-uuid")).endswith("[22P02]")
    assert one_line_error(logged_in("run", "echo hi")) == (
        "pg-shell: you have no session yet: create one with `pg-shell new [NAME]`")


@pytest.mark.parametrize("subcommand", sorted(SUBCOMMANDS))
def test_every_subcommand_explains_itself(cli, subcommand):
    result = cli(subcommand, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: pg-shell {subcommand}")
    for argument in SUBCOMMANDS[subcommand]:
        assert argument in result.stdout
    assert "examples:\n  pg-shell " + subcommand in result.stdout


# -- running commands ---------------------------------------------------------------


def test_run_prints_the_output_and_exits_with_the_commands_exit_code(shell, db):
    hi = shell("run", "echo", "hi")
    assert (hi.returncode, hi.stdout, hi.stderr) == (0, "hi\n", "")
    three = shell("run", "echo out; echo err >&2; exit 3")
    assert (three.returncode, three.stdout, three.stderr) == (3, "out\nerr\n", "")
    assert [(c["command"], c["exit_code"]) for c in commands(db)] == [
        ("echo hi", 0), ("echo out; echo err >&2; exit 3", 3)]


def test_run_streams_the_output_while_the_command_runs(shell, db):
    proc = shell.start("run", "echo a; sleep 3; echo b")
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # blocks until the CLI prints it
        still_running = [c for c in commands(db) if c["completed_at"] is None]
        assert first == "a\n"
        assert proc.poll() is None and len(still_running) == 1, "'a' came only after the command ended"
        rest, err = proc.communicate(timeout=HANG)
    finally:
        proc.kill()
    assert (proc.returncode, rest, err) == (0, "b\n", "")


def test_history_json_lists_the_commands_oldest_first(shell):
    shell("run", "true")
    shell("run", "echo two; exit 2")
    rows = json.loads(shell("history", "--json").stdout)
    assert [(r["command"], r["status"], r["exit_code"], r["output"]) for r in rows] == [
        ("true", "done", 0, ""), ("echo two; exit 2", "done", 2, "two\n")]
    assert [len(line.split()) >= 5 for line in shell("history", "--limit", "1").stdout.splitlines()] == [True]


def test_cancel_from_another_process_ends_the_run_with_a_reason(shell, db):
    proc = shell.start("run", "sleep 60")
    try:
        running = wait_for("the command to run", lambda: [c for c in commands(db) if c["status"] == "running"])
        command_id = running[0]["id"]
        cancelled = shell("cancel", str(command_id))
        assert (cancelled.returncode, cancelled.stderr) == (0, f"cancelling command {command_id}\n")
        _out, err = proc.communicate(timeout=HANG)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert err.count("\n") == 1 and err.startswith(f"pg-shell: command {command_id} cancelled"), err
    assert commands(db)[0]["status"] == "cancelled"
    again = shell("cancel", str(command_id))
    assert (again.returncode, again.stderr) == (1, f"pg-shell: command {command_id} had already ended\n")


def test_ctrl_c_cancels_the_command_and_exits_130(shell, db):
    proc = shell.start("run", "sleep 60")
    try:
        wait_for("the command to run", lambda: [c for c in commands(db) if c["status"] == "running"])
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=HANG)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.startswith("pg-shell: cancelled command ")
    wait_for("the command to end cancelled", lambda: commands(db)[0]["status"] == "cancelled")


def test_fork_starts_a_session_from_the_state_after_a_command(shell, db):
    assert shell("run", "export GREETING=hello").returncode == 0
    assert shell("run", "export GREETING=later").returncode == 0
    source = commands(db)[0]["id"]
    forked = shell("fork", str(source))
    assert forked.returncode == 0 and UUID.match(forked.stdout.strip())
    result = shell("run", "--session", forked.stdout.strip(), "echo $GREETING")
    assert (result.returncode, result.stdout) == (0, "hello\n")
    assert shell("run", "echo $GREETING").stdout == "later\n"  # the source session is untouched
    unknown = shell("fork", "999999")
    assert one_line_error(unknown).startswith("pg-shell: command not found [22023]")


def test_replay_prints_a_run_id_whose_session_reruns_the_commands(shell, db):
    shell("run", "echo one")
    shell("run", "echo two")
    first = commands(db)[0]["id"]
    replay = shell("replay", "--no-wait", shell.env["PG_SHELL_SESSION"], str(first))
    run_id = replay.stdout.strip()
    assert replay.returncode == 0 and UUID.match(run_id)
    wait_for("the replay to finish", lambda: all(c["completed_at"] for c in commands(db)))
    replayed = json.loads(shell("history", "--session", run_id, "--json").stdout)
    assert [(r["command"], r["output"]) for r in replayed] == [("echo one", "one\n"), ("echo two", "two\n")]


def test_tail_shows_the_last_commands_and_follow_shows_new_ones(shell):
    shell("run", "echo old")
    tail = shell("tail", "-n", "1")
    assert tail.returncode == 0
    assert re.fullmatch(r"\[\d+\] \$ echo old\nold\n\[\d+\] done, exit 0\n", tail.stdout), tail.stdout
    follower = shell.start("tail", "-f", "-n", "1")
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline().endswith("$ echo old\n")
        assert shell("run", "echo new").returncode == 0
        lines = [follower.stdout.readline() for _ in range(5)]
        follower.send_signal(signal.SIGINT)
        follower.communicate(timeout=HANG)
    finally:
        follower.kill()
    assert lines[:2] == ["old\n", lines[1]] and lines[1].endswith("done, exit 0\n")
    assert lines[2].endswith("$ echo new\n") and lines[3:] == ["new\n", lines[4]]
    assert lines[4].endswith("done, exit 0\n")
    assert follower.returncode == 130
