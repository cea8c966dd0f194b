"""Administration over DATABASE_URL, acting as shell_admin
(``database.as_admin``); the gateway reads the JWT secret here too."""

from __future__ import annotations

from typing import Any

from executor.db.database import Connector


def create_user(db: Connector, username: str, password: str) -> str:
    return str(db.call("SELECT shell.create_user(%s, %s) AS id", (username, password))[0]["id"])


def set_quota(db: Connector, username: str, sessions: int | None, running: int | None,
              queued: int | None, output_mb: int | None = None, files_mb: int | None = None,
              tree_entries: int | None = None, root_entries: int | None = None,
              uploads_per_minute: int | None = None, terminal_idle_s: int | None = None,
              terminal_max_s: int | None = None,
              inputs_per_second: int | None = None) -> dict[str, Any]:
    return db.call("SELECT * FROM shell.set_user_quota(%s, %s, %s, %s, %s, %s, %s, %s, %s, "
                   "%s, %s, %s)",
                   (username, sessions, running, queued, output_mb, files_mb, tree_entries,
                    root_entries, uploads_per_minute, terminal_idle_s, terminal_max_s,
                    inputs_per_second))[0]


def jwt_secret(db: Connector) -> str:
    return str(db.call("SELECT shell.jwt_secret() AS s")[0]["s"])


def usage_report(db: Connector, consumer: str, since: Any) -> list[dict[str, Any]]:
    """Usage per user since the consumer's watermark, which the same call
    (one transaction) moves past what it reports."""
    return db.call("SELECT * FROM shell.usage_report(%s, %s)", (consumer, since))


def set_templates(db: Connector, username: str, templates: list[str]) -> list[str]:
    """Grants ``username`` exactly ``templates`` (besides the open ones); returns them."""
    rows = db.call("SELECT template FROM shell.set_user_templates(%s, %s)", (username, templates))
    return [str(r["template"]) for r in rows]


def set_runtime(db: Connector, username: str, runtime: str | None) -> None:
    """Puts ``username``'s commands on ``runtime`` (None: the executor's default)."""
    db.call("SELECT shell.set_user_runtime(%s, %s)", (username, runtime))
