"""Image rollout over DATABASE_URL, on a connection acting as shell_admin: define templates,
promote an image for one, and which images commands ran on (`pg-shell image …`)."""

from __future__ import annotations

from typing import Any

from executor.db.database import Connector


def promote(db: Connector, digest: str, template: str, size_bytes: int) -> dict[str, Any]:
    """Makes ``digest`` the current image of ``template``; the row says which one it replaced."""
    return db.call("SELECT * FROM shell.promote_image(%s, %s, %s)",
                   (digest, template, size_bytes))[0]


def define_template(db: Connector, name: str, description: str | None,
                    is_open: bool | None) -> dict[str, Any]:
    """Creates ``name`` or changes what is given; the row is the template as it now is."""
    return db.call("SELECT * FROM shell.define_template(%s, %s, %s)",
                   (name, description, is_open))[0]


def usage(db: Connector) -> list[dict[str, Any]]:
    """Each promoted or used digest: commands (retained ones that ran or will
    run on it), last_used_at, promoted_at, is_current."""
    return db.call("SELECT * FROM shell.image_usage()")
