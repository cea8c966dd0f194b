"""Following commands as they run: how long a long-poll waits, which
statuses end a command, and the Printer that shows their output once each
(`pg-shell run`, `tail -f`, `replay`)."""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not needed at run time (see executor/cli/__init__.py)
if TYPE_CHECKING:
    from typing import Any, TextIO

    from executor.api_client import ApiClient

TERMINAL = frozenset({"done", "failed", "cancelled"})
LONG_POLL_S = 20
INTERRUPTED = 130  # what a shell reports for a command ended by Ctrl-C


class Printer:
    """Prints commands' output as it grows. Change rows carry the output that
    arrived after the cursor (``p_tail``), from byte ``output_offset`` on;
    whatever a row leaves out (a gap, or an output the listing cut) is read
    with read_output, so every byte is printed once."""

    def __init__(self, out: TextIO, only: int | None, headers: bool = False,
                 client: ApiClient | None = None) -> None:
        self.out = out
        self.only = only  # print just this command's output (`run`)
        self.headers = headers  # a line before and after each command (`tail`)
        self.client = client
        self.printed: dict[int, int] = {}  # bytes of each command's output printed
        self.finished: dict[int, dict[str, Any]] = {}
        self._at_line_start = True

    @property
    def at_line_start(self) -> bool:
        """Whether what was printed ends a line (a message may follow on its own)."""
        return self._at_line_start

    def show(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            command_id = int(row["id"])
            if (self.only is not None and command_id != self.only) or command_id in self.finished:
                continue
            self._show(command_id, row)
        self.out.flush()

    def _show(self, command_id: int, row: dict[str, Any]) -> None:
        done = row["status"] in TERMINAL
        if self.headers and command_id not in self.printed:
            if row["status"] == "pending":
                return  # shown once it starts, so queued commands do not interleave
            self._write_line(f"[{command_id}] $ {one_line(row['command'])}")
        printed = self.printed.setdefault(command_id, 0)
        piece = (row["output"] or "").encode()
        offset = int(row.get("output_offset") or 0)
        if offset > printed:
            printed = self._read(command_id, printed, offset)
        if offset <= printed < offset + len(piece):
            self._write(piece[printed - offset:].decode())
            printed = offset + len(piece)
        total = int(row.get("output_bytes") or printed)
        if printed < total:
            printed = self._read(command_id, printed, total)
        self.printed[command_id] = printed
        if done:
            self.finished[command_id] = row
            if self.headers:
                self._write_line(f"[{command_id}] {ending(row)}")

    def _read(self, command_id: int, start: int, end: int) -> int:
        """Prints bytes [start, end) of the output; returns where it stopped."""
        while self.client is not None and start < end:
            page = self.client.read_output(command_id, start)
            if page["next_offset"] <= start:
                break
            self._write(page["output"])
            start = int(page["next_offset"])
        return start

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self._at_line_start = text.endswith("\n")

    def _write_line(self, line: str) -> None:
        self._write(("" if self._at_line_start else "\n") + line + "\n")


def follow_to_end(printer: Printer, client: ApiClient, session_id: str, cursor: int,
                  command_id: int) -> dict[str, Any]:
    """Prints ``command_id``'s output from the session's change ``cursor``
    on, by long-poll, until it ends; its final row."""
    while (row := printer.finished.get(command_id)) is None:
        rows = client.session_changes(session_id, cursor, wait=LONG_POLL_S, tail=True)
        cursor = max([cursor, *(int(r["change_seq"]) for r in rows)])
        printer.show(rows)
    return row


def ending(row: dict[str, Any]) -> str:
    """How a finished command ended, in a few words."""
    parts = [row["status"]]
    if row.get("reason") and row["reason"] != row["status"]:
        parts.append(row["reason"])
    if row["exit_code"] is not None:
        parts.append(f"exit {row['exit_code']}")
    return ", ".join(parts)


def exit_status(code: int | None) -> int:
    return 1 if code is None else code & 0xFF


def when(timestamp: str | None) -> str:
    return (timestamp or "")[:19].replace("T", " ")


def one_line(text: str) -> str:
    return text if "\n" not in text else text.splitlines()[0] + " …"
