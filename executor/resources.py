"""The files pg_shell needs beside its code: the SQL migrations (`sql`), the web
UI (`html`), the sandbox image's build context (`sandbox-image`) and the script
that builds it (`ops/build-sandbox-image`).

In a checkout they are the project's own folders. A wheel carries copies under
`executor/_share/` (setup.py puts them there), so an installed `pg-shell` finds
them wherever it runs from."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from executor.errors import PgShellError

_INSTALLED = "_share"


def resource_dir(name: str) -> Path:
    """The folder (or file) `name`, relative to the project root: e.g. "sql"."""
    package = Path(str(resources.files("executor")))
    installed = package / _INSTALLED / name
    if installed.exists():
        return installed
    checkout = package.parent / name
    if checkout.exists():
        return checkout
    raise PgShellError(f"pg_shell's {name} is neither at {installed} nor at {checkout}: "
                            "a broken installation")
