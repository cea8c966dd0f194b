"""Canonical result records: the JSON a command's result is vouched for by.

A record is JSON with sorted keys and compact separators, stored verbatim
and hashed into the session's chain. Its *facts* are the fields that must
agree with the command's row; keep them in step with the SQL function
``shell.result_facts`` (sql/migrations/0004_result_chain.sql).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Mapping
from typing import Any

# Version 2 added the roots of the session's files before and after the
# command (sql/migrations/0011_workspace.sql); version 1 records stay valid.
RECORD_VERSION = 2
DATABASE_SIGNER = "database"
FACT_FIELDS_V1 = (
    "command_id", "session_id", "user_id", "command_sha256", "status", "exit_code", "reason",
    "truncated", "output_sha256", "cwd_before", "env_before", "cwd_after", "env_after",
    "image_digest", "worker_id", "attempt", "duration_ms",
)
FACT_FIELDS = (*FACT_FIELDS_V1, "root_before", "root_after")


def fact_fields(version: object) -> tuple[str, ...]:
    """The facts a record of this version vouches for."""
    return FACT_FIELDS_V1 if version == 1 else FACT_FIELDS


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def facts_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of a command row (as ``shell.audit_history`` returns it)."""
    return {
        "command_id": row["command_id"],
        "session_id": str(row["session_id"]),
        "user_id": str(row["user_id"]),
        "command_sha256": sha256_hex(row["command"]),
        "status": row["status"],
        "exit_code": row["exit_code"],
        "reason": row["reason"],
        "truncated": row["truncated"],
        "output_sha256": sha256_hex(row["output"] or ""),
        "cwd_before": row["cwd_before"],
        "env_before": row["env_before"],
        "cwd_after": row["cwd_after"],
        "env_after": row["env_after"],
        "image_digest": row["image_digest"],
        "worker_id": row["worker_id"],
        "attempt": row["attempt"],
        "duration_ms": row["duration_ms"],
        "root_before": row.get("root_before"),
        "root_after": row.get("root_after"),
    }


def result_record(*, signer: str, command_id: int, session_id: str, user_id: str, command: str,
                  status: str, exit_code: int | None, reason: str | None, truncated: bool,
                  output_sha256: str, cwd_before: str, env_before: dict[str, str],
                  cwd_after: str, env_after: dict[str, str], image_digest: str | None,
                  worker_id: str, attempt: int, duration_ms: int | None,
                  started_at: str | None, finished_at: str, root_before: str | None,
                  root_after: str | None, host: str | None = None) -> str:
    """The canonical text of an executor's result record. ``host`` (not a
    fact) names the host whose copy of the files now holds root_after."""
    return canonical({
        "v": RECORD_VERSION, "signer": signer, "command_id": command_id, "session_id": session_id,
        "user_id": user_id, "command_sha256": sha256_hex(command), "status": status,
        "exit_code": exit_code, "reason": reason, "truncated": bool(truncated),
        "output_sha256": output_sha256, "cwd_before": cwd_before, "env_before": env_before,
        "cwd_after": cwd_after, "env_after": env_after, "image_digest": image_digest,
        "worker_id": worker_id, "attempt": attempt, "duration_ms": duration_ms,
        "started_at": started_at, "finished_at": finished_at,
        "root_before": root_before, "root_after": root_after, "host": host,
    })


def checkpoint_record(*, signer: str, session_id: str, chain_seq: int, chain_hash: str,
                      removed: int) -> str:
    return canonical({"v": RECORD_VERSION, "kind": "checkpoint", "signer": signer,
                      "session_id": session_id, "chain_seq": chain_seq, "chain_hash": chain_hash,
                      "removed": removed, "created_at": utc_now()})


def chain_hash(prev: str, record: str) -> str:
    return sha256_hex(prev + record)


GENESIS = "0" * 64
