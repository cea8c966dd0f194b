"""Helpers for the shell_api / role tests: catching SQLSTATEs, counting rows,
and driving the executor side of a command as the executor role does."""

from __future__ import annotations

import json
import select
from typing import Any

import psycopg2
import pytest

from tests.support import call, connect_as, executor

WORKER = "test-worker"
TABLES = ("users", "sessions", "lanes", "commands", "output_chunks")


def error_of(conn: psycopg2.extensions.connection, sql: str, params: Any = None) -> psycopg2.Error:
    """The error the statement raises (the test fails if it succeeds)."""
    with pytest.raises(psycopg2.Error) as info:
        call(conn, sql, params)
    if not conn.autocommit:
        conn.rollback()
    return info.value


def sqlstate(conn: psycopg2.extensions.connection, sql: str, params: Any = None) -> tuple[str, str]:
    """(SQLSTATE, primary message) of the error the statement raises."""
    exc = error_of(conn, sql, params)
    return exc.pgcode, exc.diag.message_primary


def row_counts(dsn: str) -> dict[str, int]:
    """Rows per table, plus the lanes' counters, read as the superuser."""
    conn = psycopg2.connect(dsn)
    try:
        counts = {t: call(conn, f"SELECT count(*) AS n FROM shell.{t}")[0]["n"] for t in TABLES}
        counts["lane_state"] = call(
            conn, "SELECT coalesce(json_agg(l ORDER BY session_id), '[]') AS s"
                  " FROM (SELECT session_id, pending, active_command_id, change_seq"
                  " FROM shell.lanes) l")[0]["s"]
        counts["command_state"] = call(
            conn, "SELECT coalesce(json_agg(c ORDER BY id), '[]') AS s"
                  " FROM (SELECT id, status, cancel_requested_at, change_seq, output_bytes"
                  " FROM shell.commands) c")[0]["s"]
        return counts
    finally:
        conn.close()


def superuser_rows(dsn: str, sql: str, params: Any = None) -> list[dict[str, Any]]:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        return call(conn, sql, params)
    finally:
        conn.close()


def admin(dsn: str) -> psycopg2.extensions.connection:
    return connect_as(dsn, "shell_admin")


def claim(dsn: str, command_id: int, lease: int = 30) -> int:
    """Claims as the executor; the given command must be among those claimed.
    Returns its attempt number."""
    ex = executor(dsn)
    try:
        rows = call(ex, "SELECT * FROM shell.claim_commands(%s, 1000, %s)", (WORKER, lease))
    finally:
        ex.close()
    attempts = {r["command_id"]: r["attempt"] for r in rows}
    assert command_id in attempts, rows
    return attempts[command_id]


def start(dsn: str, command_id: int, attempt: int) -> None:
    ex = executor(dsn)
    try:
        call(ex, "SELECT shell.mark_started(%s, %s, %s, 'container-1', 'sha256:abc')",
             (command_id, WORKER, attempt))
    finally:
        ex.close()


def append(dsn: str, command_id: int, attempt: int, seq: int, data: str) -> None:
    ex = executor(dsn)
    try:
        call(ex, "SELECT shell.append_output(%s, %s, %s, %s, %s)",
             (command_id, WORKER, attempt, seq, data))
    finally:
        ex.close()


def complete(dsn: str, command_id: int, attempt: int, *, exit_code: int = 0, status: str = "done",
             cwd: str | None = None, env: dict[str, str] | None = None) -> None:
    ex = executor(dsn)
    try:
        record = {"status": status, "exit_code": exit_code, "cwd_after": cwd, "env_after": env,
                  "duration_ms": 12}
        call(ex, "SELECT shell.complete_command(%s, %s, %s, %s)",
             (command_id, WORKER, attempt,
              json.dumps({k: v for k, v in record.items() if v is not None})))
    finally:
        ex.close()


def run(dsn: str, command_id: int, output: str = "", *, exit_code: int = 0,
        cwd: str | None = None, env: dict[str, str] | None = None) -> None:
    """Runs a pending command to completion as the executor would."""
    attempt = claim(dsn, command_id)
    start(dsn, command_id, attempt)
    if output:
        append(dsn, command_id, attempt, 0, output)
    complete(dsn, command_id, attempt, exit_code=exit_code, cwd=cwd, env=env)


def listener(dsn: str, channel: str) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"LISTEN {channel}")
    return conn


def notifications(conn: psycopg2.extensions.connection, at_least: int, timeout: float = 2.0
                  ) -> list[tuple[str, str]]:
    """The (channel, payload) notifications received: waits until at least
    ``at_least`` arrived (or the timeout), then one round trip so nothing
    already committed is still in flight."""
    remaining = timeout
    conn.poll()
    while len(conn.notifies) < at_least and remaining > 0:
        if select.select([conn], [], [], 0.1) != ([], [], []):
            conn.poll()
        remaining -= 0.1
    with conn.cursor() as cur:
        cur.execute("SELECT 1")
    conn.poll()
    got = [(n.channel, n.payload) for n in conn.notifies]
    conn.notifies.clear()
    return got
