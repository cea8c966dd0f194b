"""The project's exceptions. Library errors are translated into these at the
module that talks to the library (db, sandbox), with ``raise ... from``."""

from __future__ import annotations


class PgShellError(Exception):
    """Something pg_shell could not do."""


class ConfigError(PgShellError):
    """The settings are invalid; the message says which and why."""


class DatabaseError(PgShellError):
    """PostgreSQL refused a statement; ``sqlstate`` says why (e.g. 22023)."""

    def __init__(self, message: str, sqlstate: str | None = None, hint: str | None = None,
                 detail: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.hint = hint
        self.detail = detail


class DatabaseUnavailable(DatabaseError):
    """PostgreSQL could not be reached or the connection broke; retrying may help."""


class LeaseLost(DatabaseError):
    """The command is no longer leased to this worker (expired, settled or cancelled elsewhere)."""


class MigrationError(PgShellError):
    """The migration files or the recorded migrations are inconsistent."""
