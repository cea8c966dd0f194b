"""`pg-shell replay`: start a replay run, follow its progress, and compare
each replayed command with its original (exit code and output)."""

from __future__ import annotations

import difflib
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from executor.api_client import ApiClient
from executor.cli.follow import INTERRUPTED, LONG_POLL_S, TERMINAL

DIFF_LINES = 12  # per differing command, so a table stays readable


@dataclass(frozen=True)
class Comparison:
    original_id: int | None
    replay_id: int
    command: str
    original_status: str | None
    replay_status: str
    original_exit_code: int | None
    replay_exit_code: int | None
    exit_code_same: bool
    output_same: bool
    diff: list[str]  # a short unified diff of the outputs, when they differ
    replay_reason: str | None

    @property
    def same(self) -> bool:
        return (self.exit_code_same and self.output_same
                and self.original_status == self.replay_status)


def compare(row: dict[str, Any]) -> Comparison:
    """One row of shell_api.replay_comparison, judged."""
    original = row["original_output"] or ""
    replayed = row["replay_output"] or ""
    diff = [] if original == replayed else short_diff(original, replayed)
    return Comparison(
        original_id=row["original_id"], replay_id=row["replay_id"], command=row["command"],
        original_status=row["original_status"], replay_status=row["replay_status"],
        original_exit_code=row["original_exit_code"], replay_exit_code=row["replay_exit_code"],
        exit_code_same=row["original_exit_code"] == row["replay_exit_code"],
        output_same=original == replayed, diff=diff, replay_reason=row["replay_reason"])


def short_diff(original: str, replayed: str, limit: int = DIFF_LINES) -> list[str]:
    lines = list(difflib.unified_diff(original.splitlines(), replayed.splitlines(),
                                      "original", "replay", n=1, lineterm=""))
    if len(lines) > limit:
        lines = lines[:limit] + [f"… ({len(lines) - limit} more diff lines)"]
    return lines


def follow(client: ApiClient, run_id: str, progress: TextIO) -> list[dict[str, Any]]:
    """Waits until every command of the run has ended, writing "N/M commands
    done" to ``progress`` as that changes; returns the comparison rows."""
    cursor = 0
    shown = -1
    # On a terminal the count is redrawn in place; elsewhere one line each.
    start, end = ("\r", "") if progress.isatty() else ("", "\n")
    while True:
        rows = client.replay_comparison(run_id)
        done = sum(1 for r in rows if r["replay_status"] in TERMINAL)
        if done != shown:
            progress.write(f"{start}replay {run_id}: {done}/{len(rows)} commands done{end}")
            progress.flush()
            shown = done
        if done == len(rows):
            if progress.isatty():
                progress.write("\n")
            return rows
        # Woken by any change of the run's session, then re-read.
        changes = client.session_changes(run_id, cursor, wait=LONG_POLL_S)
        cursor = max([cursor, *(int(c["change_seq"]) for c in changes)])


def print_table(comparisons: list[Comparison], out: TextIO) -> None:
    def word(same: bool) -> str:
        return "same" if same else "different"

    out.write(f"{'ORIGINAL':>9} {'REPLAY':>9}  {'EXIT':<16} {'OUTPUT':<9}  COMMAND\n")
    for c in comparisons:
        if c.exit_code_same:
            exits = f"same ({_code(c.replay_exit_code)})"
        else:
            exits = f"different ({_code(c.original_exit_code)}→{_code(c.replay_exit_code)})"
        line = c.command if "\n" not in c.command else c.command.splitlines()[0] + " …"
        out.write(f"{c.original_id or '-':>9} {c.replay_id:>9}  {exits:<16} "
                  f"{word(c.output_same):<9}  {line}\n")
        if c.original_status != c.replay_status:
            ending = c.replay_status + (f" ({c.replay_reason})" if c.replay_reason else "")
            out.write(f"{'':>21}status: {c.original_status} → {ending}\n")
        for diff_line in c.diff:
            out.write(f"{'':>21}{diff_line}\n")
    matched = sum(c.same for c in comparisons)
    out.write(f"{matched}/{len(comparisons)} commands matched\n")


def print_json(run_id: str, comparisons: list[Comparison], out: TextIO) -> None:
    body = {"run_id": run_id, "matched": all(c.same for c in comparisons),
            "commands": [{**asdict(c), "same": c.same} for c in comparisons]}
    out.write(json.dumps(body, indent=2) + "\n")


def replay_and_compare(client: ApiClient, session_id: str, start_id: int, as_json: bool) -> int:
    """Exit status: 0 when every replayed command matched its original, else 1."""
    run_id = client.replay_session(session_id, start_id)
    try:
        rows = follow(client, run_id, sys.stderr)
    except KeyboardInterrupt:
        print(f"\npg-shell: stopped following; replay run {run_id} goes on "
              f"(follow it with `pg-shell tail -f --session {run_id}`)", file=sys.stderr)
        return INTERRUPTED
    comparisons = [compare(r) for r in rows]
    if as_json:
        print_json(run_id, comparisons, sys.stdout)
    else:
        print_table(comparisons, sys.stdout)
    sys.stdout.flush()
    return 0 if all(c.same for c in comparisons) else 1


def _code(code: int | None) -> str:
    return "-" if code is None else str(code)
