"""The one way into the database: a ``Connector`` runs a statement
(``call``) or a unit of work in one transaction (``transact``). Every query
module (db/queue.py for the executor, db/admin.py, db/audit.py,
db/retention.py, db/images.py, db/gateway.py) writes each of its SQL calls
once against a Connector, so the executor, the gateway, the CLI and cleanup
send the same text.

``Database`` is the connector over one connection: kept for a long time by
the executor's threads (reconnected and retried with tenacity when
PostgreSQL goes away, so a passing outage only delays), or opened for one
piece of work (``one_off``, ``as_admin``: a CLI command, a cleanup round).
The gateway's pool is a connector too (db/gateway.py). Only the migration
runner works on a bare connection: it holds its own transactions and lock."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import tenacity

from executor.db.connection import ADMIN_ROLE, Connection, connect, query, transaction
from executor.errors import DatabaseUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


class Connector(Protocol):
    def call(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        """Runs one statement in its own transaction; its rows as dicts."""
        ...

    def transact(self, work: Callable[[Any], T]) -> T:
        """Runs ``work`` on a cursor (rows as dicts) inside one transaction."""
        ...


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


@contextlib.contextmanager
def one_off(dsn: str, purpose: str, *, role: str | None = None) -> Iterator[Database]:
    """A database for one piece of work (a CLI command, a cleanup round),
    tried once per call and closed when the work is done."""
    db = Database(dsn, role, name=f"pg-shell {purpose}", persistent=False)
    try:
        db.connection()  # a wrong DATABASE_URL is said at once, before any work
        yield db
    finally:
        db.close()


def as_admin(dsn: str, purpose: str) -> contextlib.AbstractContextManager[Database]:
    """The one way to act as shell_admin (operator commands, audit, retention)."""
    return one_off(dsn, purpose, role=ADMIN_ROLE)
