"""Administration over DATABASE_URL, on a connection acting as shell_admin
(``connection.as_admin``)."""

from __future__ import annotations

from typing import Any

from executor.db.connection import Connection, query


def create_user(conn: Connection, username: str, password: str) -> str:
    return str(query(conn, "SELECT shell.create_user(%s, %s) AS id",
                     (username, password))[0]["id"])


def set_quota(conn: Connection, username: str, sessions: int | None, running: int | None,
              queued: int | None, output_mb: int | None = None, files_mb: int | None = None,
              tree_entries: int | None = None, root_entries: int | None = None,
              uploads_per_minute: int | None = None, terminal_idle_s: int | None = None,
              terminal_max_s: int | None = None,
              inputs_per_second: int | None = None) -> dict[str, Any]:
    return query(conn, "SELECT * FROM shell.set_user_quota(%s, %s, %s, %s, %s, %s, %s, %s, %s, "
                 "%s, %s, %s)",
                 (username, sessions, running, queued, output_mb, files_mb, tree_entries,
                  root_entries, uploads_per_minute, terminal_idle_s, terminal_max_s,
                  inputs_per_second))[0]


def jwt_secret(conn: Connection) -> str:
    return str(query(conn, "SELECT shell.jwt_secret() AS s")[0]["s"])


def usage_report(conn: Connection, consumer: str, since: Any) -> list[dict[str, Any]]:
    """Usage per user since the consumer's watermark, which the same call
    (one transaction) moves past what it reports."""
    return query(conn, "SELECT * FROM shell.usage_report(%s, %s)", (consumer, since))
