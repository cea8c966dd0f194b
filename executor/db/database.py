"""A database its owner keeps for a long time (the executor's threads): one
connection, reconnected and retried with tenacity when PostgreSQL goes away,
so a passing outage only delays. One-off work (a CLI command, a cleanup
round) uses ``connection.opened`` or ``connection.as_admin`` instead."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import tenacity

from executor.db.connection import Connection, connect, query, transaction
from executor.errors import DatabaseUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


class Database:
    """One connection, used by one thread at a time, acting as ``role``."""

    def __init__(self, dsn: str, role: str | None, *, name: str = "pg-shell",
                 persistent: bool = True) -> None:
        """A ``persistent`` database retries a call until PostgreSQL is back;
        otherwise a call tries once (reconnecting first if needed) and
        raises DatabaseUnavailable."""
        self._dsn = dsn
        self._role = role
        self._name = name
        self._conn: Connection | None = None
        self._retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(DatabaseUnavailable),
            wait=tenacity.wait_exponential(multiplier=0.1, max=5),
            stop=tenacity.stop_never if persistent else tenacity.stop_after_attempt(1),
            before_sleep=self._log_retry,
            reraise=True,
        )

    def _log_retry(self, state: tenacity.RetryCallState) -> None:
        self.close()
        log.warning("database unavailable, retrying (attempt %d): %s",
                    state.attempt_number, state.outcome.exception() if state.outcome else "")

    def connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self._dsn, role=self._role, application_name=self._name)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass  # closing a broken connection: nothing left to release
            self._conn = None

    def call(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        try:
            return self._retrying(lambda: query(self.connection(), sql, params))
        except DatabaseUnavailable:
            self.close()
            raise

    def transact(self, work: Callable[[Any], T]) -> T:
        """Runs ``work`` on a cursor inside one transaction, retried whole
        (``work`` runs again) while PostgreSQL is away, as :meth:`call` is."""
        def attempt() -> T:
            with transaction(self.connection()) as cur:
                return work(cur)

        try:
            return self._retrying(attempt)
        except DatabaseUnavailable:
            self.close()
            raise
