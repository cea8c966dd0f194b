"""Where `pg-shell login` keeps the API token: $XDG_CONFIG_HOME/pg-shell/token,
mode 0600 (PG_SHELL_TOKEN, when set, takes its place)."""

from __future__ import annotations

import os
from pathlib import Path

from executor.client_settings import ClientSettings


def token_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "pg-shell" / "token"


def save_token(token: str) -> Path:
    path = token_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Created 0600 from the start, and tightened if it already existed.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(token + "\n")
    return path


def load_token(settings: ClientSettings) -> str | None:
    if settings.token:
        return settings.token
    try:
        return token_path().read_text().strip() or None
    except FileNotFoundError:
        return None
