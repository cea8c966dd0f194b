"""Delivers a command's input from the database to its supervisor.

Input rows are committed before they are delivered (DESIGN.md §13): a
thread of the command reads those after the last one delivered, whenever
the database announces input for the command (NOTIFY shell_input, passed on
by the claim loop) and at least once a second (a notification is only a
hint), waits for each row's offset (a replay's input comes when it came the
first time; live input is due at once), and sends it. The supervisor says
when each piece reached the program and whether the terminal echoed then;
what was typed with echo off loses its bytes in the database."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from executor.db.queue import ClaimedCommand
from executor.db.terminal import InputRow, TerminalDatabase
from executor.errors import PgShellError
from executor.sandbox.protocol import end_of_input_frame, input_frame, window_frame

log = logging.getLogger(__name__)

T = TypeVar("T")
POLL_S = 1.0  # how often input is looked for without a notification


class InputFeed:
    def __init__(self, db: TerminalDatabase, cmd: ClaimedCommand, worker_id: str) -> None:
        self._db = db
        self._cmd = cmd
        self._worker_id = worker_id
        self._db_lock = threading.Lock()  # one connection: the feed's thread and the watch's
        self._lock = threading.Lock()  # what was sent and delivered
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._after = -1  # the last sequence number sent
        self._kinds: dict[int, str] = {}  # sent, not yet reported delivered
        self._delivered: list[tuple[int, bool]] = []
        self._last_input = 0.0

    # -- told by the claim loop ---------------------------------------------------

    def announce(self) -> None:
        """Input was committed for the command."""
        self._wake.set()

    # -- InputFeed (executor/sandbox/protocol.py) -----------------------------------

    def start(self, send: Callable[[bytes], None]) -> None:
        self._thread = threading.Thread(target=self._run, args=(send,),
                                        name=f"input-{self._cmd.command_id}", daemon=True)
        self._thread.start()

    def delivered(self, seq: int, echo: bool) -> None:
        with self._lock:
            self._delivered.append((seq, echo))
        self._last_input = time.monotonic()
        self._wake.set()

    def echo_changed(self, echo: bool) -> None:
        # Called before the output that follows the change is passed on.
        self._call(lambda: self._db.terminal_echo(self._cmd, self._worker_id, echo))

    def last_input(self) -> float:
        return self._last_input

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self._report()

    def seal(self) -> str | None:
        """No input after this; the hash of all the command took (None if the
        database could not say). Closes the feed's connection."""
        try:
            return self._call(lambda: self._db.seal_input(self._cmd, self._worker_id))
        finally:
            self._db.close()

    # -- the feed's thread ------------------------------------------------------------

    def _run(self, send: Callable[[bytes], None]) -> None:
        while not self._stopped.is_set():
            self._wake.clear()
            self._report()
            read_at = time.monotonic()
            rows = self._call(lambda: self._db.pending_input(self._cmd, self._worker_id,
                                                             self._after)) or []
            for row in rows:
                due = read_at + row.due_in_ms / 1000
                if self._stopped.wait(max(0.0, due - time.monotonic())):
                    return
                send(_frame(row))
                with self._lock:
                    self._kinds[row.seq] = row.kind
                self._after = row.seq
            if len(rows) < 256:  # a full page: more is waiting
                self._wake.wait(POLL_S)

    def _report(self) -> None:
        """Tells the database what reached the program, and which of it was
        typed with echo off (its bytes are then dropped there)."""
        with self._lock:
            done, self._delivered = self._delivered, []
            hidden = [seq for seq, echo in done if not echo and self._kinds.get(seq) == "data"]
            for seq, _echo in done:
                self._kinds.pop(seq, None)
        if done:
            upto = max(seq for seq, _echo in done)
            self._call(lambda: self._db.input_delivered(self._cmd, self._worker_id, upto, hidden))

    def _call(self, work: Callable[[], T]) -> T | None:
        try:
            with self._db_lock:
                return work()
        except PgShellError as exc:  # the lease is gone: the worker settles that
            log.warning("command_id=%s input: %s", self._cmd.command_id, exc)
            return None


def _frame(row: InputRow) -> bytes:
    if row.kind == "resize":
        return window_frame(row.cols or 80, row.rows or 24)
    if row.kind == "eof":
        return end_of_input_frame(row.seq)
    return input_frame(row.seq, (row.data or "").encode("utf-8"))
