"""Reading the chained history for `pg-shell audit`, acting as shell_admin."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from executor.db.connection import Connection, query


def keys(conn: Connection) -> list[dict[str, Any]]:
    return query(conn, "SELECT key_id, public_key, worker_id, registered_at::text FROM "
                       "shell.audit_keys()")


def sessions(conn: Connection, session_id: str | None = None) -> list[dict[str, Any]]:
    return query(conn, "SELECT * FROM shell.audit_sessions(%s::uuid)", (session_id,))


def links(conn: Connection, session_id: str) -> list[dict[str, Any]]:
    return query(conn, "SELECT * FROM shell.audit_history(%s::uuid)", (session_id,))


def history(conn: Connection, session_id: str | None = None
            ) -> Iterator[tuple[dict[str, Any], list[Mapping[str, Any]]]]:
    """Each session with a chain and its links, one session in memory at a time."""
    for session in sessions(conn, session_id):
        session["session_id"] = str(session["session_id"])
        rows: list[Mapping[str, Any]] = [
            {**row, "session_id": str(row["session_id"]), "user_id": str(row["user_id"])}
            for row in links(conn, session["session_id"])]
        yield session, rows


def register_key(conn: Connection, public_key_hex: str, owner: str) -> str:
    return str(query(conn, "SELECT shell.register_signing_key(%s, %s) AS key_id",
                     (public_key_hex, owner))[0]["key_id"])
