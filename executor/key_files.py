"""Key files the executor creates on first start (its signing key, its
secrets key): private to the user, and never seen half-written."""

from __future__ import annotations

import os
from pathlib import Path


def create_private_file(path: Path, data: bytes) -> None:
    """Creates ``path``, mode 0600, with ``data``, unless it exists by then."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Written aside, then linked into place: two processes starting at once
    # keep the first key, and nobody reads a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
