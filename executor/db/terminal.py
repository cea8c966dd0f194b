"""The executor's calls for commands that take input (DESIGN.md §13,
sql/migrations/0029_interactive.sql): what the command runs with, the input
to deliver, what the supervisor reported of it, and the input sealed when
the command is over."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from executor.db.database import Database
from executor.db.queue import ClaimedCommand, ExecutorDatabase


@dataclass(frozen=True)
class InputRow:
    seq: int
    offset_ms: int  # when to deliver it, from the command's start
    kind: str  # "data", "resize" or "eof"
    data: str | None
    cols: int | None
    rows: int | None


def input_sha256(rows: list[dict[str, Any]]) -> str:
    """The hash of a command's input stream as its result record states it:
    one line per row (sequence, offset, kind, and the SHA-256 of the bytes
    or the window size), so redacted input counts by its hash alone."""
    import hashlib

    def line(r: dict[str, Any]) -> str:
        what = r["sha256"] or (f"{r['cols']}x{r['rows']}" if r["kind"] == "resize" else "")
        return f"{r['seq']} {r['offset_ms']} {r['kind']} {what}\n"

    return hashlib.sha256("".join(map(line, rows)).encode()).hexdigest()


def command_terminal(db: Database, cmd: ClaimedCommand, worker_id: str) -> dict[str, Any] | None:
    """What a held command takes input with: tty, cols, rows, and the
    tenant's idle_s and max_s; None for a command without input (most)."""
    rows = db.call("SELECT shell.command_terminal(%s, %s, %s) AS t",
                   (cmd.command_id, worker_id, cmd.attempt))
    found = rows[0]["t"]
    if isinstance(found, str):
        found = json.loads(found)
    return dict(found) if found is not None else None


class TerminalDatabase(ExecutorDatabase):
    """The connection of one running command that takes input."""

    def pending_input(self, cmd: ClaimedCommand, worker_id: str, after: int) -> list[InputRow]:
        rows = self.call("SELECT * FROM shell.pending_input(%s, %s, %s, %s)",
                         (cmd.command_id, worker_id, cmd.attempt, after))
        return [InputRow(**row) for row in rows]

    def input_delivered(self, cmd: ClaimedCommand, worker_id: str, upto: int,
                        hidden: list[int]) -> None:
        self.call("SELECT shell.input_delivered(%s, %s, %s, %s, %s::integer[])",
                  (cmd.command_id, worker_id, cmd.attempt, upto, hidden))

    def terminal_echo(self, cmd: ClaimedCommand, worker_id: str, echo: bool) -> None:
        self.call("SELECT shell.terminal_echo(%s, %s, %s, %s)",
                  (cmd.command_id, worker_id, cmd.attempt, echo))

    def seal_input(self, cmd: ClaimedCommand, worker_id: str) -> str:
        """Closes the command's input; the hash of all it took."""
        return input_sha256(self.call("SELECT * FROM shell.seal_input(%s, %s, %s)",
                                      (cmd.command_id, worker_id, cmd.attempt)))
