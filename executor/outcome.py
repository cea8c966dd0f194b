"""How a sandbox result becomes a command's final status and reason."""

from __future__ import annotations

from dataclasses import dataclass

SHUTDOWN = "executor shutdown"
LEASE_LOST = "lease lost"


@dataclass(frozen=True)
class Outcome:
    status: str  # "done", "failed" or "cancelled"
    exit_code: int | None
    reason: str | None


def outcome_of(exit_code: int, sandbox_reason: str | None, kill_reason: str | None) -> Outcome:
    """``sandbox_reason`` is what the sandbox saw (timeout, oom, cancelled);
    ``kill_reason`` is why the executor stopped the container, if it did."""
    if sandbox_reason == "cancelled":
        if kill_reason and kill_reason != "cancelled":
            return Outcome("failed", exit_code, kill_reason)
        return Outcome("cancelled", exit_code, "cancelled")
    if sandbox_reason in ("timeout", "oom"):
        return Outcome("failed", exit_code, sandbox_reason)
    return Outcome("done", exit_code, None)
