"""Helpers for tests that act as a tenant, an executor or an admin, exactly as
PostgREST and the executor do: SET ROLE plus request.jwt.claims."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import psycopg2
import psycopg2.extras


def connect_as(dsn: str, role: str,
               claims: dict[str, Any] | None = None) -> psycopg2.extensions.connection:
    """An autocommit connection acting as ``role`` with these JWT claims."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"SET ROLE {role}")
        if claims is not None:
            cur.execute("SELECT set_config('request.jwt.claims', %s, false)", (json.dumps(claims),))
    return conn


def tenant(dsn: str, user_id: str) -> psycopg2.extensions.connection:
    return connect_as(dsn, "shell_user", {"sub": str(user_id), "role": "shell_user"})


def executor(dsn: str) -> psycopg2.extensions.connection:
    return connect_as(dsn, "shell_executor")


def create_user(dsn: str, username: str, password: str = "correct horse") -> str:
    conn = connect_as(dsn, "shell_admin")
    try:
        return str(one(conn, "SELECT shell.create_user(%s, %s)", (username, password)))
    finally:
        conn.close()


def call(conn: psycopg2.extensions.connection, sql: str,
         params: Any = None) -> list[dict[str, Any]]:
    with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(sql, params)
        return [dict(r) for r in cur.fetchall()] if cur.description else []


def one(conn: psycopg2.extensions.connection, sql: str, params: Any = None) -> Any:
    rows = call(conn, sql, params)
    assert len(rows) == 1, rows
    return next(iter(rows[0].values()))


def wait_for(what: str, check: Callable[[], Any], timeout: float = 120, every: float = 0.1) -> Any:
    """``check()``'s first truthy value; the timeout only proves "it did not hang"."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} ({timeout}s)")
        time.sleep(every)
    return value


# Forks sleeping children until the kernel refuses one: "refused ERRNO STARTED"
# (or "not-refused 0 STARTED" after a thousand).
FORK_UNTIL_REFUSED = """python3 -c '
import os, time
started = 0
try:
    while started < 1000:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        started += 1
except OSError as exc:
    print("refused", exc.errno, started)
else:
    print("not-refused 0", started)
'"""
