"""The local side of a terminal command: the user's terminal in raw mode
(every key, Ctrl-C included, is a byte for the remote program; the remote
terminal does the echo and line editing) and put back as it was on every
way out; its window size; and the signals that matter while it is raw,
turned into bytes on a pipe that the key loop waits on with the keys."""

from __future__ import annotations

import contextlib
import os
import signal

TYPE_CHECKING = False  # `typing` is not needed at run time (see executor/cli/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Iterator

DEFAULT_WINDOW = (80, 24)
WAKE = 0  # the byte a thread writes to the signal pipe: not a signal number


def window_size(*fds: int) -> tuple[int, int] | None:
    """(columns, rows) of the first of ``fds`` that is a terminal with a
    size, within what the API takes (1-1000 each); None if none is."""
    for fd in fds:
        try:
            size = os.get_terminal_size(fd)
        except OSError:
            continue
        if size.columns > 0 and size.lines > 0:
            return min(size.columns, 1000), min(size.lines, 1000)
    return None


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """``fd``'s terminal in raw mode for the block, then as it was. Input
    typed ahead is kept (TCSADRAIN, not TCSAFLUSH): keys pressed while the
    command was submitted reach it."""
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSADRAIN)
    try:
        yield
    finally:
        # The terminal may be gone (a hang-up): then there is nothing to restore.
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class SignalPipe:
    """``signals`` caught for the block and written, one byte each, to a
    pipe (signal.set_wakeup_fd), so one select() waits for keys and signals
    alike; threads wake it with WAKE. A signal ignored when we started
    (nohup's SIGHUP) stays ignored. Everything is put back on close()."""

    def __init__(self, signals: tuple[int, ...]) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)
        self._previous: dict[int, object] = {}
        self._previous_wakeup = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        for number in signals:
            if signal.getsignal(number) is not signal.SIG_IGN:
                self._previous[number] = signal.signal(number, _noted)

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # full (it will be read anyway) or closed
            os.write(self.write_fd, bytes([WAKE]))

    def read(self) -> bytes:
        try:
            return os.read(self.read_fd, 4096)
        except BlockingIOError:
            return b""

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous_wakeup)
        for number, handler in self._previous.items():
            signal.signal(number, handler)  # type: ignore[arg-type]
        # The pipe stays open: a thread still waiting on the API may wake()
        # it later, and a closed descriptor's number may by then name another file.


def _noted(_signum: int, _frame: object) -> None:
    """Does nothing: the wakeup byte already told the key loop."""
