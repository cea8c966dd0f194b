"""Image rollout over DATABASE_URL, on a connection acting as shell_admin: promote an image,
and which images commands ran on (`pg-shell image …`)."""

from __future__ import annotations

from typing import Any

from executor.db.connection import Connection, query


def promote(conn: Connection, digest: str) -> dict[str, Any]:
    """Makes ``digest`` the current image; the row says which one it replaced."""
    return query(conn, "SELECT * FROM shell.promote_image(%s)", (digest,))[0]


def current(conn: Connection) -> str | None:
    rows = query(conn, "SELECT digest FROM shell.current_image()")
    return str(rows[0]["digest"]) if rows else None


def usage(conn: Connection) -> list[dict[str, Any]]:
    """Each promoted or used digest: commands (retained ones that ran or will
    run on it), last_used_at, promoted_at, is_current."""
    return query(conn, "SELECT * FROM shell.image_usage()")
