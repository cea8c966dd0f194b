"""Canonical result records: the JSON a command's result is vouched for by.

A record is JSON with sorted keys and compact separators, stored verbatim
and hashed into the session's chain. Its *facts* are the fields that must
agree with the command's row; keep them in step with the SQL function
``shell.result_facts`` (as it is now: sql/schema.sql).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# Version 2 added the roots of the session's files before and after the
# command (sql/migrations/0011_workspace.sql); version 3 the link's own
# chain_seq and chain_prev, so a signature also vouches for where the link
# sits (sql/migrations/0017_limits_quotas_audit.sql); version 4 the upload
# the entry applied (null for a command), so the database's record of an
# upload, which no executor signs, vouches for what was put where
# (sql/migrations/0025_audit_uploads_files.sql); version 5 the SHA-256 of
# the input the command took (null without input; DESIGN.md §13); version 6
# the container runtime it ran under (sql/migrations/0044_runtimes.sql);
# version 7 the secrets it got, by name and version, never their values
# (sql/migrations/0045_secrets.sql).
# Earlier records stay valid for what they state.
RECORD_VERSION = 7
DATABASE_SIGNER = "database"
# The records the database writes itself (shell.chain_result: uploads, and
# commands that end without an executor's record, e.g. cancelled before they
# ran or refused at completion) stay at version 4, without input_sha256.
DATABASE_RECORD_VERSION = 4
FACT_FIELDS_V1 = (
    "command_id", "session_id", "user_id", "command_sha256", "status", "exit_code", "reason",
    "truncated", "output_sha256", "cwd_before", "env_before", "cwd_after", "env_after",
    "image_digest", "worker_id", "attempt", "duration_ms",
)
FACT_FIELDS_V2 = (*FACT_FIELDS_V1, "root_before", "root_after")
FACT_FIELDS_V3 = (*FACT_FIELDS_V2, "chain_seq", "chain_prev")
FACT_FIELDS_V4 = (*FACT_FIELDS_V3, "upload")
FACT_FIELDS_V5 = (*FACT_FIELDS_V4, "input_sha256")
FACT_FIELDS_V6 = (*FACT_FIELDS_V5, "runtime")
FACT_FIELDS = (*FACT_FIELDS_V6, "secrets")


def fact_fields(version: object) -> tuple[str, ...]:
    """The facts a record of this version vouches for."""
    return {1: FACT_FIELDS_V1, 2: FACT_FIELDS_V2, 3: FACT_FIELDS_V3, 4: FACT_FIELDS_V4,
            5: FACT_FIELDS_V5, 6: FACT_FIELDS_V6}.get(
        version if isinstance(version, int) else 0, FACT_FIELDS)


def binds_position(record: Mapping[str, Any]) -> bool:
    """Whether the record names its own chain position (version 3 on)."""
    version = record.get("v")
    return isinstance(version, int) and version >= 3


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def input_sha256(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The hash of a command's input stream as its result record states it
    (None: it took no input): one line per row, its sequence number, offset,
    kind, and the SHA-256 of its bytes or its window size, so redacted
    input counts by its hash alone."""
    if not rows:
        return None

    def line(r: Mapping[str, Any]) -> str:
        what = r["sha256"] or (f"{r['cols']}x{r['rows']}" if r["kind"] == "resize" else "")
        return f"{r['seq']} {r['offset_ms']} {r['kind']} {what}\n"

    return hashlib.sha256("".join(map(line, rows)).encode()).hexdigest()


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
        "chain_seq": row.get("chain_seq"),
        "chain_prev": row.get("chain_prev"),
        "upload": row.get("upload"),
        "input_sha256": input_sha256(row.get("input") or []),
        "runtime": row.get("runtime"),
        "secrets": row.get("secrets"),
    }


@dataclass(frozen=True)
class Completion:
    """A command's outcome, from the sandbox's result to the signed record to
    the database: ``shell.complete_command`` reads the row's outcome from the
    record this becomes."""

    status: str  # "done", "failed" or "cancelled"
    exit_code: int | None
    reason: str | None
    output_sha256: str
    image_digest: str | None
    started_at: str | None = None  # the executor's clock; None: it never started
    truncated: bool = False
    duration_ms: int | None = None
    cwd_after: str | None = None  # None: the cwd the command started in
    env_after: Mapping[str, str] | None = None  # None: the environment it started with
    root_after: str | None = None  # None: the files it started with
    host: str | None = None  # not a fact: the host whose copy now holds root_after
    input_sha256: str | None = None  # of the input it took (None: it took none)
    runtime: str | None = None  # the container runtime it ran under (None: it never started)


class Claimed(Protocol):
    """What a record states of the command as it was claimed."""

    @property
    def command_id(self) -> int: ...
    @property
    def session_id(self) -> str: ...
    @property
    def user_id(self) -> str: ...
    @property
    def command(self) -> str: ...
    @property
    def cwd(self) -> str: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def attempt(self) -> int: ...
    @property
    def root(self) -> str | None: ...
    @property
    def secrets(self) -> Sequence[Mapping[str, Any]]: ...


@dataclass(frozen=True)
class ChainPosition:
    """Where a link goes: its chain_seq and the hash of the link before it
    (``shell.chain_position``, read in the completing transaction)."""

    seq: int
    prev: str


@dataclass(frozen=True)
class SignedRecord:
    text: str
    signature: str
    key_id: str


def result_record(*, signer: str, worker_id: str, claimed: Claimed, outcome: Completion,
                  position: ChainPosition, finished_at: str | None = None) -> str:
    """The canonical text of an executor's result record: it states what the
    command's row will hold, and where its link sits in the chain."""
    return canonical({
        "v": RECORD_VERSION, "signer": signer, "command_id": claimed.command_id,
        "session_id": str(claimed.session_id), "user_id": str(claimed.user_id),
        "command_sha256": sha256_hex(claimed.command), "status": outcome.status,
        "exit_code": outcome.exit_code, "reason": outcome.reason,
        "truncated": bool(outcome.truncated), "output_sha256": outcome.output_sha256,
        "cwd_before": claimed.cwd, "env_before": dict(claimed.env),
        "cwd_after": claimed.cwd if outcome.cwd_after is None else outcome.cwd_after,
        "env_after": dict(claimed.env if outcome.env_after is None else outcome.env_after),
        "image_digest": outcome.image_digest, "worker_id": worker_id,
        "attempt": claimed.attempt, "duration_ms": outcome.duration_ms,
        "started_at": outcome.started_at, "finished_at": finished_at or utc_now(),
        "root_before": claimed.root,
        "root_after": claimed.root if outcome.root_after is None else outcome.root_after,
        "host": outcome.host, "chain_seq": position.seq, "chain_prev": position.prev,
        "upload": None,  # an executor runs commands; the database applies uploads
        "input_sha256": outcome.input_sha256,
        "runtime": outcome.runtime,
        # As the claim recorded them on the row: name and version, no value.
        "secrets": [{"name": s["name"], "version": s["version"]} for s in claimed.secrets] or None,
    })


def checkpoint_record(*, signer: str, session_id: str, chain_seq: int, chain_hash: str,
                      removed: int) -> str:
    return canonical({"v": RECORD_VERSION, "kind": "checkpoint", "signer": signer,
                      "session_id": session_id, "chain_seq": chain_seq, "chain_hash": chain_hash,
                      "removed": removed, "created_at": utc_now()})


def chain_hash(prev: str, record: str) -> str:
    return sha256_hex(prev + record)


GENESIS = "0" * 64
