"""Connections, transactions and the translation of psycopg2's errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from executor.errors import DatabaseError, DatabaseUnavailable, LeaseLost

Connection = psycopg2.extensions.connection

# Statement failures that are about the connection, not the statement.
_UNAVAILABLE_CLASSES = ("08", "57")
# A write refused by a server that is (or just became) a replica: after a
# failover, a connection made to the old primary. Another connection finds
# the new one (a multi-host DSN with target_session_attrs=read-write).
READ_ONLY_SQLSTATE = "25006"
ADMIN_ROLE = "shell_admin"
LEASE_LOST_SQLSTATE = "PS001"  # shell.lease_lost (sql/schema.sql)


def translate(exc: psycopg2.Error) -> DatabaseError:
    """psycopg2's exception as the project's own."""
    code = exc.pgcode
    diag = getattr(exc, "diag", None)
    message = (diag.message_primary if diag and diag.message_primary else str(exc)).strip()
    hint = diag.message_hint if diag else None
    detail = diag.message_detail if diag else None
    if isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)) and (
        code is None or code[:2] in _UNAVAILABLE_CLASSES
    ) or code == READ_ONLY_SQLSTATE:
        return DatabaseUnavailable(message, code, hint, detail)
    if code == LEASE_LOST_SQLSTATE:
        return LeaseLost(message, code, hint, detail)
    return DatabaseError(message, code, hint, detail)


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    try:
        yield
    except psycopg2.Error as exc:
        raise translate(exc) from exc


def connect(dsn: str, *, role: str | None = None, application_name: str = "pg-shell") -> Connection:
    """A connection in autocommit mode (each call is its own transaction),
    acting as ``role`` when given."""
    with translated_errors():
        conn = psycopg2.connect(
            dsn, application_name=application_name, connect_timeout=5,
            keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
        )
        conn.autocommit = True
        if role:
            with conn.cursor() as cur:
                cur.execute("SET ROLE %s", (psycopg2.extensions.AsIs(quote_ident(role, conn)),))
    return conn


def quote_ident(name: str, conn: Connection) -> str:
    return psycopg2.extensions.quote_ident(name, conn)


@contextlib.contextmanager
def transaction(conn: Connection) -> Iterator[Any]:
    """A cursor inside one transaction, committed on success."""
    with translated_errors():
        conn.autocommit = False
        try:
            with conn:  # commits or rolls back
                with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                    yield cur
        finally:
            if not conn.closed:
                conn.autocommit = True


def query(conn: Connection, sql: str, params: Any = None) -> list[dict[str, Any]]:
    """Runs one statement in its own transaction; its rows as dicts."""
    with translated_errors(), conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []


def json_param(value: Any) -> psycopg2.extras.Json:
    return psycopg2.extras.Json(value)
