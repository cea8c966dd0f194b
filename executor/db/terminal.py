"""The executor's calls for commands that take input (DESIGN.md §13,
sql/migrations/0029_interactive.sql): what the command runs with, the input
to deliver, what the supervisor reported of it, and the input sealed when
the command is over."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from executor.audit.records import input_sha256
from executor.db.database import Database
from executor.db.queue import ClaimedCommand, ExecutorDatabase


@dataclass(frozen=True)
class InputRow:
    seq: int
    due_in_ms: int  # how long it has yet to wait (the database's clock): 0 when live
    kind: str  # "data", "resize" or "eof"
    data: str | None
    cols: int | None
    rows: int | None


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

    def seal_input(self, cmd: ClaimedCommand, worker_id: str) -> str | None:
        """Closes the command's input; the hash of all it took (None: none)."""
        return input_sha256(self.call("SELECT * FROM shell.seal_input(%s, %s, %s)",
                                      (cmd.command_id, worker_id, cmd.attempt)))
