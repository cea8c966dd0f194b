"""A command a worker holds, and how its sandbox result becomes its final
status and reason."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from executor.db.queue import ClaimedCommand

if TYPE_CHECKING:
    from .input_feed import InputFeed

SHUTDOWN = "executor shutdown"
LEASE_LOST = "lease lost"


@dataclass(frozen=True)
class Outcome:
    status: str  # "done", "failed" or "cancelled"
    exit_code: int | None
    reason: str | None


def outcome_of(exit_code: int, sandbox_reason: str | None, kill_reason: str | None) -> Outcome:
    """``sandbox_reason`` is what the sandbox saw (timeout, idle, oom, cancelled);
    ``kill_reason`` is why the executor stopped the container, if it did."""
    if sandbox_reason == "cancelled":
        if kill_reason and kill_reason != "cancelled":
            return Outcome("failed", exit_code, kill_reason)
        return Outcome("cancelled", exit_code, "cancelled")
    if sandbox_reason in ("timeout", "idle", "oom"):
        return Outcome("failed", exit_code, sandbox_reason)
    return Outcome("done", exit_code, None)


@dataclass
class Run:
    """A command this worker holds, and why it was told to stop, if it was."""

    claimed: ClaimedCommand
    cancel: threading.Event = field(default_factory=threading.Event)
    kill_reason: str | None = None
    started_at: str | None = None  # the executor's clock, for the result record
    claimed_monotonic: float = field(default_factory=time.monotonic)
    feed: InputFeed | None = None  # delivers its input (a command that takes input)
    input_sha256: str | None = None  # of all the input it took, once sealed

    def stop(self, reason: str) -> None:
        if not self.cancel.is_set():
            self.kill_reason = reason
            self.cancel.set()
