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


class ApiError(PgShellError):
    """The HTTP API refused a call. ``code`` is the SQLSTATE or PostgREST code
    of the error body (e.g. 22023, PGRST202), ``status`` the HTTP status."""

    def __init__(self, message: str, code: str | None = None, status: int | None = None,
                 details: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.details = details
        self.hint = hint


class ApiUnavailable(ApiError):
    """The HTTP API could not be reached, or did not answer; retrying may help."""
