"""Image rollout over DATABASE_URL, on a connection acting as shell_admin: promote an image,
and which images commands ran on (`pg-shell image …`)."""

from __future__ import annotations

from typing import Any

from executor.db.database import Connector


def promote(db: Connector, digest: str) -> dict[str, Any]:
    """Makes ``digest`` the current image; the row says which one it replaced."""
    return db.call("SELECT * FROM shell.promote_image(%s)", (digest,))[0]


def usage(db: Connector) -> list[dict[str, Any]]:
    """Each promoted or used digest: commands (retained ones that ran or will
    run on it), last_used_at, promoted_at, is_current."""
    return db.call("SELECT * FROM shell.image_usage()")
