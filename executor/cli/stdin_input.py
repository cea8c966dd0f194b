"""What `pg-shell run` hands a command as its stdin when the CLI's own stdin
is not a terminal: the data piped or redirected into it, read whole (the
API takes up to 1 MiB with the command, p_stdin), as ssh hands its stdin on.

Before this, stdin was ignored; a script that runs `pg-shell run` with an
interactive terminal, /dev/null (cron, systemd) or an empty pipe still sends
nothing. A character device is never read: /dev/null is empty anyway and
/dev/zero or a serial line would never end. A pipe that its writer keeps
open is read until it closes (as ssh does): `-n` (or `< /dev/null`) says
not to read it, for `while read …; do pg-shell run …; done` loops."""

from __future__ import annotations

import os
import stat

from executor.errors import PgShellError

MAX_STDIN = 1048576  # bytes submit_command takes as p_stdin
UPLOAD_HINT = ("save it to a file, upload it with `pg-shell cp FILE :PATH` and redirect it "
                  "in the command: pg-shell run 'COMMAND < PATH'")


def piped_stdin(fd: int = 0) -> str | None:
    """All of what is piped or redirected into ``fd``; None when it is a
    terminal, a device, closed, or gave nothing."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:  # no stdin at all (closed by whoever started us)
        return None
    if os.isatty(fd) or stat.S_ISCHR(mode):
        return None
    data = _read_at_most(fd, MAX_STDIN + 1)
    if len(data) > MAX_STDIN:
        raise PgShellError(f"stdin is larger than 1 MiB, the most a command takes with it: "
                           f"{UPLOAD_HINT}")
    if not data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = "\0"  # refused below, with the same advice
    if "\0" in text:
        # The API's input is text: PostgreSQL holds neither NUL nor bytes that are not UTF-8.
        raise PgShellError(f"stdin is not UTF-8 text (a binary file): {UPLOAD_HINT}")
    return text


def _read_at_most(fd: int, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while size < limit:
        piece = os.read(fd, min(65536, limit - size))
        if not piece:
            break
        parts.append(piece)
        size += len(piece)
    return b"".join(parts)
