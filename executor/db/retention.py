"""Retention over DATABASE_URL (acting as shell_admin): removes the oldest
links of each session's chain in batches, each batch one transaction that
also saves the session's signed checkpoint."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from executor.db.database import Connector

# (session_id, chain_seq, chain_hash, removed) → (record, signature, key_id)
CheckpointSigner = Callable[[str, int, str, int], tuple[str, str, str]]


def sessions_with_old_history(db: Connector, before: datetime.datetime, after: str | None,
                              limit: int) -> list[str]:
    rows = db.call("SELECT s::text AS id FROM shell.retention_sessions(%s, %s::uuid, %s) AS s",
                   (before, after, limit))
    return [r["id"] for r in rows]


def remove_batch(db: Connector, session_id: str, before: datetime.datetime, limit: int,
                 sign: CheckpointSigner) -> int:
    """Removes up to ``limit`` old links of one session; returns how many."""
    def remove(cur: Any) -> int:
        cur.execute("SELECT * FROM shell.retention_plan(%s::uuid, %s, %s)",
                    (session_id, before, limit))
        plan: dict[str, Any] | None = cur.fetchone()
        if plan is None:
            return 0
        record, signature, key_id = sign(session_id, plan["chain_seq"], plan["chain_hash"],
                                         plan["removed"])
        cur.execute("SELECT shell.apply_retention(%s::uuid, %s::bigint[], %s, %s, %s, %s, %s, %s) "
                    "AS gone",
                    (session_id, plan["command_ids"], plan["chain_seq"], plan["chain_hash"],
                     plan["removed"], record, signature, key_id))
        return int(cur.fetchone()["gone"])
    return db.transact(remove)


def idle_sessions(db: Connector, session_ids: list[str],
                  idle_before: datetime.datetime) -> set[str]:
    rows = db.call("SELECT s::text AS id FROM shell.idle_sessions(%s::uuid[], %s) AS s",
                   (session_ids, idle_before))
    return {r["id"] for r in rows}


def archived_sessions(db: Connector, session_ids: list[str]) -> set[str]:
    """Those of the sessions that are archived and whose files are in the database."""
    rows = db.call("SELECT session_id::text AS id FROM shell.host_sessions(%s::uuid[]) "
                   "WHERE archived AND stored", (session_ids,))
    return {r["id"] for r in rows}


def collect_upload_parts(db: Connector) -> int:
    """Deletes the staged parts of uploads abandoned for upload_stale_after_s; how many."""
    return int(db.call("SELECT shell.collect_upload_parts() AS removed")[0]["removed"])


def collect_files(db: Connector, grace: datetime.timedelta) -> tuple[int, int]:
    """Deletes trees and blobs nothing retained reaches; returns how many of each."""
    row = db.call("SELECT * FROM shell.collect_files(%s)", (grace,))[0]
    return int(row["trees"]), int(row["blobs"])
