"""A command on a terminal, driven from the local one (`pg-shell run -t`,
`pg-shell attach`). Three loops run at once, because each waits on
something else:
- the key loop (the main thread, which is where signals arrive) waits on
  the local stdin and the signal pipe: keys go on the input queue, SIGWINCH
  puts the new window size there, SIGTERM and SIGHUP end the loop;
- the sender (a thread, its own connection) makes the queue's calls;
- the follower (a thread, the submitting connection) long-polls the output
  and writes it to stdout raw, as the remote terminal produced it.
The key loop ends when the follower saw the command end (its exit code is
ours), when either thread failed, or on SIGTERM/SIGHUP, which leave the
command running to be rejoined with `pg-shell attach`. The local terminal
is raw only inside the key loop and put back on every way out of it."""

from __future__ import annotations

import codecs
import contextlib
import os
import select
import signal
import stat
import sys
import threading

from executor.cli.follow import Printer, ending, exit_status, follow_to_end
from executor.cli.input_queue import InputQueue, send_all
from executor.cli.local_terminal import (
    DEFAULT_WINDOW,
    WAKE,
    SignalPipe,
    raw_mode,
    window_size,
)
from executor.errors import ApiError, PgShellError

TYPE_CHECKING = False  # `typing` is not needed at run time (see executor/cli/__init__.py)
if TYPE_CHECKING:
    from typing import Any

    from executor.api_client import ApiClient

STDIN, STDOUT = 0, 1
# SIGINT too: without raw mode (stdin is not a terminal) a Ctrl-C is sent
# on as the byte a terminal would have turned it into.
SIGNALS = (signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
CTRL_C = "\x03"


def local_window() -> tuple[int, int]:
    """The local terminal's size, for the remote one; 80x24 without one."""
    return window_size(STDOUT, STDIN) or DEFAULT_WINDOW


def interact(client: ApiClient, command_id: int, session_id: str, cursor: int, *,
             shown: list[dict[str, Any]] | None = None, forward_stdin: bool = True) -> int:
    """Runs the three loops for ``command_id`` (following the session's
    changes from ``cursor``, after printing ``shown``); the exit status."""
    forward_stdin = forward_stdin and _has_input(STDIN)
    raw = forward_stdin and os.isatty(STDIN)
    # Output is text from the API, written as UTF-8 whatever the locale says.
    out = open(STDOUT, "w", encoding="utf-8", errors="replace", newline="", closefd=False)
    printer = Printer(out, only=command_id, client=client)
    queue = InputQueue()
    outcome: dict[str, Any] = {}
    signals = SignalPipe(SIGNALS)

    def follow() -> None:
        try:
            printer.show(shown or [])
            outcome["row"] = follow_to_end(printer, client, session_id, cursor, command_id)
        except BaseException as exc:  # handed to the key loop, which raises it
            outcome.setdefault("error", exc)
        finally:
            signals.wake()

    def send() -> None:
        sender = client.another()
        try:
            send_all(queue, sender, command_id)
        except BaseException as exc:  # as above
            outcome.setdefault("error", exc)
            signals.wake()
        finally:
            sender.close()

    try:
        with raw_mode(STDIN) if raw else contextlib.nullcontext():
            for target in (follow, send):
                threading.Thread(target=target, name=target.__name__, daemon=True).start()
            stopped_by = _key_loop(STDIN if forward_stdin else None, raw, queue, signals,
                                   outcome)
    finally:
        queue.stop()
        signals.close()
        with contextlib.suppress(OSError):
            out.flush()
    return _outcome(command_id, outcome, stopped_by, printer)


def _key_loop(fd: int | None, raw: bool, queue: InputQueue, signals: SignalPipe,
              outcome: dict[str, Any]) -> int | None:
    """Forwards keys and signals until the threads have an outcome (None)
    or a signal stops us (its number)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    watched = [signals.read_fd] + ([] if fd is None else [fd])
    while True:
        ready = select.select(watched, [], [])[0]
        # Signals first: a window resized before a key was pressed is sent before it.
        if signals.read_fd in ready:
            for number in signals.read():
                if number == WAKE and ("row" in outcome or "error" in outcome):
                    return None
                if number == signal.SIGWINCH:
                    queue.put_resize(*local_window())
                elif number == signal.SIGINT:
                    queue.put_data(CTRL_C)
                elif number in (signal.SIGTERM, signal.SIGHUP):
                    return number
        if fd is not None and fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the terminal is gone
                data = b""
            if data:
                queue.put_data(_typed(decoder.decode(data)))
            elif raw:
                return signal.SIGHUP  # the local terminal hung up
            else:  # the end of what was piped in: the remote terminal's end of input
                queue.put_data(_typed(decoder.decode(b"", final=True)))
                queue.put_eof()
                watched.remove(fd)


def _has_input(fd: int) -> bool:
    """Whether ``fd`` is worth forwarding: a terminal, a pipe or a file.
    Not /dev/null (or no stdin at all): its end would be sent as the end-of-
    file character, ending a REPL that someone only meant to watch."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return os.isatty(fd) or not stat.S_ISCHR(mode)


def _typed(text: str) -> str:
    """What can be sent of ``text``: the API's input is text, and PostgreSQL
    text holds no NUL (Ctrl-@, Ctrl-Space), so that key is dropped."""
    return text.replace("\0", "")


def _outcome(command_id: int, outcome: dict[str, Any], stopped_by: int | None,
             printer: Printer) -> int:
    """Says how it ended, on stderr (on a line of its own, now that the
    terminal is no longer raw); the exit status."""
    still = (f"command {command_id} still runs: `pg-shell attach {command_id}` rejoins it, "
             f"`pg-shell cancel {command_id}` stops it")
    lead = "" if printer.at_line_start else "\n"
    if stopped_by is not None:
        name = signal.Signals(stopped_by).name
        with contextlib.suppress(OSError):  # after a hang-up there may be no terminal to tell
            print(f"{lead}pg-shell: {name}: detached; {still}", file=sys.stderr)
        return 128 + stopped_by
    row = outcome.get("row")
    if row is None:
        exc = outcome["error"]
        if isinstance(exc, PgShellError):
            raise PgShellError(f"{lead}{_described(exc)}; {still}") from exc
        raise exc
    if row["status"] == "done":
        return exit_status(row["exit_code"])
    print(f"{lead}pg-shell: command {command_id} {ending(row)}", file=sys.stderr)
    code = row["exit_code"]
    return exit_status(code) if code else 1


def _described(exc: PgShellError) -> str:
    """The error as main() prints it (with an API error's code and hint)."""
    if isinstance(exc, ApiError):
        code = f" [{exc.code}]" if exc.code else ""
        hint = f" ({exc.hint})" if exc.hint else ""
        return f"{exc}{code}{hint}"
    return str(exc)
