"""The headless CLI as a user runs it: `pg-shell …` subprocesses against the
real gateway and the real executor daemon (tests/fixtures_stack.py), over
a fresh database and the real Docker engine."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pty
import re
import signal
import stat
import subprocess
import sys
import tarfile
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
    "run": ["COMMAND", "--session", "--tty", "--no-tty", "--no-stdin", "1 MiB"],
    "attach": ["COMMAND_ID", "--session"],
    "tail": ["--session", "--follow", "--lines"],
    "cancel": ["COMMAND_ID"],
    "fork": ["COMMAND_ID"],
    "replay": ["SESSION", "START_ID"],
    "history": ["--session", "--limit", "--json"],
    "files": ["SESSION", "--at", "--json", "PG_SHELL_SESSION"],
    "cp": ["SOURCE", "DEST", "SESSION:PATH", "--at", "stdin", "stdout", "permission bits"],
    "changes": ["COMMAND", "--json", "added (+)", "modified (~)", "deleted (-)"],
    "export": ["SESSION", "--at", "tar", "terminal"],
}


class Cli:
    """Runs `pg-shell` with its own config directory, pointed at the gateway."""

    def __init__(self, url: str, home: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
        self.env.pop("DATABASE_URL", None)  # the CLI needs nothing but the API
        self.env.update({"PG_SHELL_URL": url, "XDG_CONFIG_HOME": str(home / "config"),
                         "HOME": str(home)})
        self.token_file = home / "config" / "pg-shell" / "token"

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "executor.cli.main", *args]

    def __call__(self, *args: str, input: str = "", env: dict[str, str] | None = None,
                 timeout: float = HANG) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), input=input, capture_output=True, text=True,
                              check=False, env={**self.env, **(env or {})}, cwd=REPO,
                              timeout=timeout)

    def raw(self, *args: str, input: bytes = b"",
            stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
        """The same, with bytes in and out (file contents are not text)."""
        return subprocess.run(self.argv(*args), input=input, stdout=stdout, stderr=subprocess.PIPE,
                              check=False, env=self.env, cwd=REPO, timeout=HANG)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, bufsize=1, env=self.env,
                                cwd=REPO)


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
    assert one_line_error(cli("sessions")).startswith(
        "pg-shell: not logged in: run `pg-shell login")


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
    assert one_line_error(failed).endswith(
        "[PGRST301] (log in again with `pg-shell login USERNAME`)")


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
        assert proc.poll() is None and len(still_running) == 1, (
            "'a' came only after the command ended")
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
    last = shell("history", "--limit", "1").stdout.splitlines()
    assert [len(line.split()) >= 5 for line in last] == [True]


def test_cancel_from_another_process_ends_the_run_with_a_reason(shell, db):
    proc = shell.start("run", "sleep 60")
    try:
        running = wait_for("the command to run",
                           lambda: [c for c in commands(db) if c["status"] == "running"])
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
    assert (again.returncode, again.stderr) == (
        1, f"pg-shell: command {command_id} had already ended\n")


def test_ctrl_c_cancels_the_command_and_exits_130(shell, db):
    proc = shell.start("run", "sleep 60")
    try:
        wait_for("the command to run",
                 lambda: [c for c in commands(db) if c["status"] == "running"])
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
    assert [(r["command"], r["output"]) for r in replayed] == [
        ("echo one", "one\n"), ("echo two", "two\n")]


def test_tail_shows_the_last_commands_and_follow_shows_new_ones(shell):
    shell("run", "echo old")
    tail = shell("tail", "-n", "1")
    assert tail.returncode == 0
    assert re.fullmatch(r"\[\d+\] \$ echo old\nold\n\[\d+\] done, exit 0\n",
                        tail.stdout), tail.stdout
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


# -- files: cp, files, changes, export ----------------------------------------------

BINARY = bytes(range(256)) * 3 + b"\x00\xff\xfe\x00"  # NUL and bytes that are not UTF-8


def files_of(cli: Cli, *args: str) -> dict[str, tuple[str, int, int, str | None]]:
    listed = cli("files", "--json", *args)
    assert listed.returncode == 0, listed.stderr
    return {f["path"]: (f["kind"], f["mode"], f["size"], f["target"])
            for f in json.loads(listed.stdout)}


def test_cp_uploads_and_downloads_every_byte_and_keeps_the_local_mode(logged_in, tmp_path):
    session = logged_in("new").stdout.strip()
    local = tmp_path / "tool"
    local.write_bytes(BINARY)
    local.chmod(0o750)
    up = logged_in("cp", str(local), f"{session}:bin/tool")
    assert (up.returncode, up.stdout, up.stderr) == (0, "", "")
    down = logged_in("cp", f"{session}:bin/tool", str(tmp_path / "back"))
    assert (down.returncode, down.stdout, down.stderr) == (0, "", "")
    assert (tmp_path / "back").read_bytes() == BINARY
    to_stdout = logged_in.raw("cp", f"{session}:bin/tool", "-")
    assert (to_stdout.returncode, to_stdout.stdout, to_stdout.stderr) == (0, BINARY, b"")
    # stdin becomes a 0644 file; a PATH ending in / and a local directory keep the name;
    # `:PATH` is the default session.
    assert logged_in.raw("cp", "-", f"{session}:in/stdin.bin", input=BINARY[::-1]).returncode == 0
    assert logged_in("cp", str(local), f"{session}:in").returncode == 0
    assert logged_in("cp", str(local), f"{session}:made/").returncode == 0
    into = tmp_path / "into"
    into.mkdir()
    default = {"PG_SHELL_SESSION": session}
    assert logged_in("cp", ":in/stdin.bin", str(into), env=default).returncode == 0
    assert (into / "stdin.bin").read_bytes() == BINARY[::-1]
    assert files_of(logged_in, session) == {
        "bin": ("dir", 0o755, len(BINARY), None),
        "bin/tool": ("file", 0o750, len(BINARY), None),
        "in": ("dir", 0o755, 2 * len(BINARY), None),
        "in/stdin.bin": ("file", 0o644, len(BINARY), None),
        "in/tool": ("file", 0o750, len(BINARY), None),
        "made": ("dir", 0o755, len(BINARY), None),
        "made/tool": ("file", 0o750, len(BINARY), None),
    }
    assert logged_in("files", session).stdout.splitlines() == [
        "drwxr-xr-x   772  bin",
        "-rwxr-x---   772  bin/tool",
        "drwxr-xr-x  1544  in",
        "-rw-r--r--   772  in/stdin.bin",
        "-rwxr-x---   772  in/tool",
        "drwxr-xr-x   772  made",
        "-rwxr-x---   772  made/tool",
    ]
    # An upload replaces the file at PATH, mode and all.
    assert logged_in.raw("cp", "-", f"{session}:bin/tool", input=b"new").returncode == 0
    assert logged_in.raw("cp", f"{session}:bin/tool", "-").stdout == b"new"
    assert files_of(logged_in, session)["bin/tool"] == ("file", 0o644, 3, None)


def test_cp_refusals_exit_non_zero_with_the_servers_message(logged_in, tmp_path, db, user):
    session = logged_in("new").stdout.strip()
    local = tmp_path / "f"
    local.write_bytes(b"0123456789ab")
    hint = "(Give a path relative to the session's home, such as src/main.py.)"
    assert one_line_error(logged_in("cp", f"{session}:../etc/passwd", str(tmp_path / "out"))) == (
        f"pg-shell: invalid path '../etc/passwd' [22023] {hint}")
    assert one_line_error(logged_in("cp", str(local), f"{session}:/etc/motd")) == (
        f"pg-shell: invalid path '/etc/motd' [22023] {hint}")
    assert one_line_error(logged_in("cp", str(local), f"{session}:a//b")) == (
        f"pg-shell: invalid path 'a//b' [22023] {hint}")
    assert one_line_error(logged_in("cp", f"{session}:missing", str(tmp_path / "out"))) == (
        "pg-shell: no such file: missing [22023] (List the session's files with session_files.)")
    assert not (tmp_path / "out").exists()
    assert logged_in("cp", str(local), f"{session}:dir/f").returncode == 0
    assert one_line_error(logged_in("cp", f"{session}:dir", "-")) == (
        "pg-shell: dir is a directory, not a file [22023]")
    # Onto a directory, an upload goes into it, as cp's would (from stdin it needs a name);
    # under a file, it is refused.
    assert logged_in("cp", str(local), f"{session}:dir").returncode == 0  # dir/f again
    assert one_line_error(logged_in("cp", "-", f"{session}:dir")) == (
        "pg-shell: dir is a directory: give the uploaded file a name (SESSION:dir/NAME)")
    assert one_line_error(logged_in("cp", str(local), f"{session}:dir/f/x")) == (
        "pg-shell: f is not a directory [22023]")
    # Which side is the session's must be clear.
    assert "neither of" in one_line_error(logged_in("cp", str(local), str(tmp_path / "g")))
    assert "both of" in one_line_error(logged_in("cp", f"{session}:a", f"{session}:b"))
    assert one_line_error(logged_in("cp", str(tmp_path), f"{session}:d")).startswith(
        f"pg-shell: {tmp_path} is not a regular file")
    # The files quota, and a session with a queued command, refuse uploads.
    conn = psycopg2.connect(db)
    conn.autocommit = True
    try:
        conn.cursor().execute("UPDATE shell.users SET max_file_bytes = 20 WHERE username = 'alice'")
    finally:
        conn.close()
    over = one_line_error(logged_in("cp", str(local), f"{session}:second"))
    assert over.startswith("pg-shell: files quota reached ("), over
    assert " of 20 bytes) [PT413] (Deleting files does not free it" in over, over
    tenant = support.tenant(db, user)
    try:
        # Past the files quota no command is queued either: raise it again.
        conn = psycopg2.connect(db)
        conn.autocommit = True
        conn.cursor().execute("UPDATE shell.users SET max_file_bytes = DEFAULT")
        conn.close()
        # No executor runs: the command stays queued.
        call(tenant, "SELECT shell_api.submit_command(%s, 'true')", (session,))
    finally:
        tenant.close()
    assert one_line_error(logged_in("cp", str(local), f"{session}:dir/f")) == (
        "pg-shell: session is busy [PT409] (Upload when its commands have finished.)")
    assert files_of(logged_in, session) == {
        "dir": ("dir", 0o755, 12, None), "dir/f": ("file", 0o644, 12, None)}


MAKE_FILES = ("mkdir -p src/pkg && printf hello > src/pkg/a.txt"
              " && printf '#!/bin/sh\\n' > src/run.sh && chmod 750 src/run.sh"
              " && ln -s pkg/a.txt src/link && printf x > gone")


def test_files_and_changes_show_what_each_command_did(shell, db):
    assert shell("run", MAKE_FILES).returncode == 0
    second_command = "rm gone && printf 'hello world' > src/pkg/a.txt && mkdir empty"
    assert shell("run", second_command).returncode == 0
    first, second = (c["id"] for c in commands(db))
    assert shell("files").stdout.splitlines() == [
        "drwxr-xr-x   0  empty",
        "drwxr-xr-x  21  src",
        "lrwxrwxrwx   0  src/link -> pkg/a.txt",
        "drwxr-xr-x  11  src/pkg",
        "-rw-r--r--  11  src/pkg/a.txt",
        "-rwxr-x---  10  src/run.sh",
    ]
    assert set(files_of(shell, "--at", str(first))) == {
        "gone", "src", "src/link", "src/pkg", "src/pkg/a.txt", "src/run.sh"}
    assert shell("changes", str(first)).stdout.splitlines() == [
        "+ gone", "+ src/", "+ src/link", "+ src/pkg/", "+ src/pkg/a.txt", "+ src/run.sh"]
    assert shell("changes", str(second)).stdout.splitlines() == [
        "+ empty/", "- gone", "~ src/pkg/a.txt"]
    assert json.loads(shell("changes", "--json", str(second)).stdout) == [
        {"path": "empty", "change": "added", "kind": "dir", "size": 0},
        {"path": "gone", "change": "deleted", "kind": "file", "size": 0},
        {"path": "src/pkg/a.txt", "change": "modified", "kind": "file", "size": 11},
    ]
    assert one_line_error(shell("changes", "999999")).startswith(
        "pg-shell: command not found [22023]")


def test_an_uploaded_file_is_in_the_home_of_the_next_command_and_its_output_comes_back(shell):
    assert shell.raw("cp", "-", ":data/in.bin", input=BINARY).returncode == 0
    assert shell("run", "sha256sum data/in.bin | cut -c1-64").stdout == (
        hashlib.sha256(BINARY).hexdigest() + "\n")
    assert shell("run", "tr '\\000' '\\001' < data/in.bin > data/out.bin").returncode == 0
    assert shell.raw("cp", ":data/out.bin", "-").stdout == BINARY.replace(b"\x00", b"\x01")


def test_export_writes_a_tar_with_the_contents_modes_and_links(shell, db):
    assert shell("run", MAKE_FILES).returncode == 0
    assert shell("run", "printf changed > src/pkg/a.txt").returncode == 0
    first = commands(db)[0]["id"]
    exported = shell.raw("export")
    assert exported.returncode == 0, exported.stderr
    with tarfile.open(fileobj=io.BytesIO(exported.stdout), mode="r:") as tar:
        members = {m.name: (m.type, m.mode, m.linkname) for m in tar.getmembers()}
        contents = {m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                    for m in tar.getmembers() if m.isfile()}
    assert members == {
        "gone": (tarfile.REGTYPE, 0o644, ""),
        "src": (tarfile.DIRTYPE, 0o755, ""),
        "src/link": (tarfile.SYMTYPE, 0o777, "pkg/a.txt"),
        "src/pkg": (tarfile.DIRTYPE, 0o755, ""),
        "src/pkg/a.txt": (tarfile.REGTYPE, 0o644, ""),
        "src/run.sh": (tarfile.REGTYPE, 0o750, ""),
    }
    assert contents == {"gone": b"x", "src/pkg/a.txt": b"changed", "src/run.sh": b"#!/bin/sh\n"}
    at_first = shell.raw("export", shell.env["PG_SHELL_SESSION"], "--at", str(first))
    with tarfile.open(fileobj=io.BytesIO(at_first.stdout), mode="r:") as tar:
        assert tar.extractfile("src/pkg/a.txt").read() == b"hello"  # type: ignore[union-attr]
    # Never onto a terminal.
    controller, terminal = pty.openpty()
    try:
        refused = shell.raw("export", stdout=terminal)
    finally:
        os.close(controller)
        os.close(terminal)
    assert refused.returncode == 1
    assert refused.stderr == (b"pg-shell: refusing to write a tar archive to a terminal: "
                              b"redirect it, e.g. pg-shell export > files.tar\n")
