"""`pg-shell run -t`, `pg-shell attach` and stdin given to `pg-shell run`,
as a user at a terminal meets them: the CLI runs on a pseudo-terminal of
its own (its controlling terminal, so a resize sends it SIGWINCH and its
raw mode is that terminal's), against the real gateway, executor and
Docker engine (tests/fixtures_stack.py). The input queue's ordering is
also checked on its own, without the stack."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from executor.api_client import ApiClient, RateLimited
from executor.cli.input_queue import DATA, EOF, MAX_PIECE, RESIZE, InputQueue, send_all
from tests import support
from tests.cli.test_cli import HANG, PASSWORD, Cli, commands
from tests.fixtures_stack import REPO, Daemon, Gateway


@pytest.fixture
def user(db: str) -> str:
    return support.create_user(db, "alice", PASSWORD)


@pytest.fixture
def shell(gateway: Gateway, user: str, daemon: Daemon, tmp_path: Path) -> Cli:
    """Logged in, with a session (PG_SHELL_SESSION), and the executor running."""
    cli = Cli(gateway.url, tmp_path)
    assert cli("login", "alice", input=PASSWORD + "\n").returncode == 0
    created = cli("new", "main")
    assert created.returncode == 0, created.stderr
    cli.env["PG_SHELL_SESSION"] = created.stdout.strip()
    return cli


class Terminal:
    """`pg-shell ARGS` on a pseudo-terminal of ``cols`` x ``rows``: the
    test types on the controller side and reads there what the CLI wrote
    (stdout and stderr alike, as on a screen)."""

    def __init__(self, cli: Cli, *args: str, cols: int = 100, rows: int = 30) -> None:
        self.controller, self.tty = pty.openpty()
        self.resize(cols, rows)
        self.before = termios.tcgetattr(self.tty)
        self.proc = subprocess.Popen(
            cli.argv(*args), stdin=self.tty, stdout=self.tty, stderr=self.tty, env=cli.env,
            cwd=REPO, start_new_session=True, preexec_fn=_controlling_terminal)
        self.screen = b""

    def resize(self, cols: int, rows: int) -> None:
        """As a terminal window resized: the kernel sends the CLI SIGWINCH."""
        fcntl.ioctl(self.controller, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, text: str) -> None:
        os.write(self.controller, text.encode())

    def read_until(self, text: str) -> str:
        """Everything shown so far, once it holds ``text`` (a liveness bound only)."""
        deadline = time.monotonic() + HANG
        while text.encode() not in self.screen:
            assert time.monotonic() < deadline, f"no {text!r} on the screen: {self.screen!r}"
            assert self._read(deadline - time.monotonic()), (
                f"the CLI ended (exit {self.proc.poll()}) before {text!r}: {self.screen!r}")
        return self.screen.decode(errors="replace")

    def _read(self, timeout: float) -> bool:
        """Reads what is there; False once the CLI has closed its side."""
        if select.select([self.controller], [], [], max(0.0, timeout))[0]:
            try:
                data = os.read(self.controller, 65536)
            except OSError:  # EIO: nothing holds the terminal any more
                return False
            self.screen += data
            return bool(data)
        return True

    def raw(self) -> bool:
        """Whether the CLI has put its terminal in raw mode (no echo, no line editing)."""
        return not termios.tcgetattr(self.tty)[3] & (termios.ECHO | termios.ICANON)

    def wait(self) -> int:
        """The CLI's exit status, reading the screen meanwhile (so it never blocks on writing)."""
        deadline = time.monotonic() + HANG
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, f"the CLI did not end: {self.screen!r}"
            self._read(0.1)
        while select.select([self.controller], [], [], 0)[0] and self._read(0):
            pass
        return self.proc.returncode

    def restored(self) -> bool:
        return termios.tcgetattr(self.tty) == self.before

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.controller)
        os.close(self.tty)


def _controlling_terminal() -> None:
    """In the child, after setsid: stdin's terminal becomes its controlling one."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.fixture
def terminals() -> Any:
    opened: list[Terminal] = []

    def open_terminal(cli: Cli, *args: str, **size: int) -> Terminal:
        opened.append(Terminal(cli, *args, **size))
        return opened[-1]

    yield open_terminal
    for terminal in opened:
        terminal.close()


def input_rows(db: str, command_id: int, kind: str) -> list[dict[str, Any]]:
    conn = psycopg2.connect(db)
    conn.autocommit = True
    try:
        return support.call(conn, "SELECT * FROM shell.command_input WHERE command_id = %s "
                                  "AND kind = %s ORDER BY seq", (command_id, kind))
    finally:
        conn.close()


def typed_input(db: str, command_id: int) -> str:
    return "".join(row["data"] for row in input_rows(db, command_id, "data"))


def running_command(db: str) -> int:
    running = support.wait_for("a command to run", lambda: [
        c for c in commands(db) if c["status"] == "running"], timeout=HANG)
    return int(running[-1]["id"])


# -- a terminal ---------------------------------------------------------------------


def test_a_python_repl_on_a_terminal_answers_and_the_terminal_is_restored(shell, terminals):
    term = terminals(shell, "run", "python3", "-q")  # a terminal by default: stdin and stdout are
    term.read_until(">>> ")
    assert term.raw()
    term.type("1+1\r")
    assert "\r\n2\r\n" in term.read_until("2\r\n>>> ")
    term.type("exit()\r")
    assert term.wait() == 0
    assert term.restored()


def test_a_prompt_is_answered_and_stty_size_follows_the_window(shell, db, terminals):
    term = terminals(shell, "run", "-t", 'stty size; read -p "name? " n; echo "hi $n"; '
                                         'read -p "again? " x; stty size', cols=100, rows=30)
    assert "30 100" in term.read_until("name? ")
    term.type("bob\r")
    term.read_until("hi bob")
    term.resize(120, 40)  # SIGWINCH: the CLI sends the new size
    # The signal and a key pressed right after it may reach the CLI in either
    # order (another thread may take the signal), as a person never types
    # within microseconds of a resize: the key waits until the size is sent.
    command_id = commands(db)[-1]["id"]
    support.wait_for("the new size sent", lambda: input_rows(db, command_id, "resize"),
                     timeout=HANG)
    term.type("\r")
    term.read_until("40 120")
    assert term.wait() == 0
    assert term.restored()
    assert typed_input(db, commands(db)[-1]["id"]) == "bob\r\r"


def test_a_command_that_fails_restores_the_terminal_and_exits_with_its_code(shell, terminals):
    term = terminals(shell, "run", "-t", "echo oops; exit 3")
    assert term.wait() == 3
    assert "oops" in term.screen.decode()
    assert term.restored()


def test_keys_typed_faster_than_the_input_rate_all_arrive_in_order(shell, db, terminals):
    conn = psycopg2.connect(db)
    conn.autocommit = True
    conn.cursor().execute("UPDATE shell.users SET max_inputs_per_second = 2")
    conn.close()
    term = terminals(shell, "run", "-t", 'read -p "line? " l; echo "got [$l]"')
    term.read_until("line? ")
    line = "the quick brown fox"
    for key in line:  # one key at a time: many small pieces, most refused (429) and sent again
        term.type(key)
        time.sleep(0.01)
    term.type("\r")
    term.read_until(f"got [{line}]")
    assert term.wait() == 0
    assert typed_input(db, commands(db)[-1]["id"]) == line + "\r"


def test_sigterm_detaches_restoring_the_terminal_and_attach_rejoins(shell, db, terminals):
    term = terminals(shell, "run", "-t", 'read -p "name? " n; echo "hi $n"')
    term.read_until("name? ")
    command_id = running_command(db)
    term.proc.send_signal(signal.SIGTERM)
    assert term.wait() == 128 + signal.SIGTERM
    assert term.restored()
    assert f"pg-shell attach {command_id}" in term.screen.decode()
    assert commands(db)[-1]["status"] == "running"
    # Attaching shows what was printed so far, then takes the answer.
    again = terminals(shell, "attach", str(command_id))
    again.read_until("name? ")
    support.wait_for("raw mode", again.raw, timeout=HANG)
    again.type("ann\r")
    again.read_until("hi ann")
    assert again.wait() == 0
    assert again.restored()


def test_attach_refuses_an_ended_command_and_one_without_a_terminal(shell, db, terminals):
    assert shell("run", "true").returncode == 0
    ended = commands(db)[-1]["id"]
    term = terminals(shell, "attach", str(ended))
    assert term.wait() == 1
    assert f"pg-shell: command {ended} has ended (done, exit 0): nothing to attach to" in (
        term.screen.decode())
    plain = shell.start("run", "-T", "sleep 60")
    try:
        command_id = running_command(db)
        term = terminals(shell, "attach", str(command_id))
        assert term.wait() == 1
        assert f"pg-shell: command {command_id} has no terminal" in term.screen.decode()
        assert term.restored()
    finally:
        shell("cancel", str(commands(db)[-1]["id"]))
        plain.kill()
        plain.wait()


class CountingClient(ApiClient):
    """The real client, counting the calls the API refused for their rate."""

    refused = 0

    def send_input(self, command_id: int, data: str) -> int:
        try:
            return super().send_input(command_id, data)
        except RateLimited:
            self.refused += 1
            raise


def test_a_call_refused_for_the_input_rate_is_made_again_after_the_wait(shell, db):
    conn = psycopg2.connect(db)
    conn.autocommit = True
    conn.cursor().execute("UPDATE shell.users SET max_inputs_per_second = 1")
    conn.close()
    client = CountingClient(shell.env["PG_SHELL_URL"], shell.token_file.read_text().strip())
    session = shell.env["PG_SHELL_SESSION"]
    _cursor, command_id = client.submit_after_cursor(session, 'read a; read b; echo "[$a$b]"',
                                                     window=(80, 24))
    queue = InputQueue()
    sender = threading.Thread(target=send_all, args=(queue, client, command_id), daemon=True)
    sender.start()
    queue.put_data("a\r")
    support.wait_for("the first piece to go", lambda: not queue.pending(), timeout=HANG)
    queue.put_data("b\r")  # within the second: refused, then made again
    support.wait_for("the second piece to go", lambda: not queue.pending(), timeout=HANG)
    ended = support.wait_for("the command to end", lambda: [
        c for c in commands(db) if c["id"] == command_id and c["completed_at"]], timeout=HANG)
    queue.stop()
    sender.join(HANG)
    assert client.refused >= 1
    assert (ended[0]["status"], ended[0]["exit_code"]) == ("done", 0)
    assert typed_input(db, command_id) == "a\rb\r"
    assert "[ab]" in client.read_output(command_id)["output"]
    client.close()


# -- stdin that is not a terminal ----------------------------------------------------


def test_piped_stdin_is_the_commands_input(shell, db):
    counted = shell("run", "wc -l", input="a\nb\n")
    assert (counted.returncode, counted.stdout.strip(), counted.stderr) == (0, "2", "")
    # An empty pipe gives no input (as before stdin was read), and -n reads none.
    assert shell("run", "cat; echo end", input="").stdout == "end\n"
    assert shell("run", "-n", "cat; echo end", input="ignored\n").stdout == "end\n"
    # With -t, what is piped in is typed into the terminal, then the end-of-file character
    # (which a program reads as the end only at a line's start, as at any terminal).
    typed = shell("run", "-t", "wc -l", input="a\nb\n")
    assert typed.returncode == 0, typed
    assert typed.stdout.replace("\r\n", "\n").endswith("a\nb\n2\n"), typed.stdout


def test_stdin_beyond_a_mebibyte_or_binary_is_refused_before_submitting(shell, db):
    big = shell("run", "wc -c", input="x" * (1048576 + 1))
    assert big.returncode == 1
    assert big.stderr.startswith("pg-shell: stdin is larger than 1 MiB"), big.stderr
    assert "upload it with `pg-shell cp FILE :PATH` and redirect it" in big.stderr
    binary = shell.raw("run", "wc -c", input=b"\xff\x00\x01")
    assert binary.returncode == 1
    assert binary.stderr.startswith(b"pg-shell: stdin is not UTF-8 text"), binary.stderr
    assert commands(db) == []
    exactly = shell("run", "wc -c", input="y" * 1048576)
    assert (exactly.returncode, exactly.stdout.strip()) == (0, "1048576")


# -- the input queue on its own -------------------------------------------------------


def test_the_queue_joins_what_waits_and_keeps_the_order():
    queue = InputQueue()
    queue.put_data("ab")
    assert queue.next() == (DATA, "ab")
    queue.put_data("c")  # typed while "ab" is in flight (or refused): joins what waits
    assert queue.next() == (DATA, "abc")  # a refused call is made again, with what came since
    queue.sent(DATA, "ab")  # only what went is taken off
    assert queue.pending() == [(DATA, "c")]
    queue.put_resize(80, 24)
    queue.put_resize(90, 30)  # only the last size matters
    queue.put_data("é")
    assert queue.pending() == [(DATA, "c"), (RESIZE, (90, 30)), (DATA, "é")]
    for _ in range(3):
        queue.sent(*queue.next())  # type: ignore[misc]
    queue.put_resize(10, 10)
    resize = queue.next()
    queue.put_resize(100, 40)  # changed while the old size was in flight: sent again
    queue.sent(*resize)  # type: ignore[misc]
    assert queue.pending() == [(RESIZE, (100, 40))]
    queue.put_eof()
    queue.put_data("after the end")
    assert queue.pending() == [(RESIZE, (100, 40)), (EOF, None)]
    queue.stop()
    assert queue.next() is None


def test_a_piece_is_at_most_64_kib_and_never_splits_a_character():
    queue = InputQueue()
    queue.put_data("a" + "€" * MAX_PIECE)  # 3 bytes each
    kind, first = queue.next()  # type: ignore[misc]
    assert len(first.encode()) <= MAX_PIECE and first == "a" + "€" * ((MAX_PIECE - 1) // 3)
    queue.sent(kind, first)
    assert queue.next() == (DATA, "€" * (MAX_PIECE // 3))
    assert queue.pending()[0][1] == "€" * (MAX_PIECE - len(first) + 1)
