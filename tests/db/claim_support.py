"""Helpers for the claiming tests: an executor worker speaking the executor
entry points over its own connection, tenants with sessions, and a check
that a statement fails with a given SQLSTATE."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg2
import pytest

from tests.support import call, connect_as, create_user, executor, one, tenant, wait_for


@dataclass(frozen=True)
class Claimed:
    id: int
    session_id: str
    user_id: str
    attempt: int
    cwd: str
    env: dict[str, str]


class Worker:
    """One executor: its own connection as shell_executor, its own worker id."""

    def __init__(self, dsn: str, worker_id: str) -> None:
        self.id = worker_id
        self.conn = executor(dsn)

    def claim(self, limit: int = 1, lease_seconds: int = 30) -> list[Claimed]:
        rows = call(self.conn, "SELECT * FROM shell.claim_commands(%s, %s, %s)",
                    (self.id, limit, lease_seconds))
        return [Claimed(r["command_id"], str(r["session_id"]), str(r["user_id"]), r["attempt"],
                        r["cwd"], r["env"]) for r in rows]

    def start(self, cmd: Claimed | int, attempt: int | None = None) -> None:
        cid, att = _id_attempt(cmd, attempt)
        call(self.conn, "SELECT shell.mark_started(%s, %s, %s, %s, %s)",
             (cid, self.id, att, f"ctr-{cid}-{att}", "sha256:test"))

    def append(self, cmd: Claimed | int, seq: int, data: str, attempt: int | None = None) -> None:
        cid, att = _id_attempt(cmd, attempt)
        call(self.conn, "SELECT shell.append_output(%s, %s, %s, %s, %s)",
             (cid, self.id, att, seq, data))

    def complete(self, cmd: Claimed | int, status: str | None = "done", *,
                 attempt: int | None = None,
                 exit_code: int | None = 0, reason: str | None = None, cwd: str | None = None,
                 env: Any = None) -> None:
        cid, att = _id_attempt(cmd, attempt)
        record = {"status": status, "exit_code": exit_code, "reason": reason, "cwd_after": cwd,
                  "env_after": env, "duration_ms": 5}
        self.complete_with(cid, json.dumps({k: v for k, v in record.items() if v is not None}),
                           attempt=att)

    def complete_with(self, cmd: Claimed | int, record: str | None,
                      attempt: int | None = None) -> None:
        """Completes with an unsigned result record as given."""
        cid, att = _id_attempt(cmd, attempt)
        call(self.conn, "SELECT shell.complete_command(%s, %s, %s, %s)",
             (cid, self.id, att, record))

    def heartbeat(self, held: list[tuple[int, int]], lease_seconds: int = 30) -> dict[int, bool]:
        rows = call(self.conn, "SELECT * FROM shell.heartbeat(%s, %s::bigint[], %s::int[], %s)",
                    (self.id, [h[0] for h in held], [h[1] for h in held], lease_seconds))
        return {r["command_id"]: r["cancel_requested"] for r in rows}

    def settle(self, started_ids: list[int]) -> dict[int, str]:
        rows = call(self.conn, "SELECT * FROM shell.settle_worker(%s, %s::bigint[])",
                    (self.id, started_ids))
        return {r["command_id"]: r["status"] for r in rows}

    def expire_leases(self) -> dict[int, str]:
        return {r["command_id"]: r["status"]
                for r in call(self.conn, "SELECT * FROM shell.expire_leases()")}

    def close(self) -> None:
        self.conn.close()


def _id_attempt(cmd: Claimed | int, attempt: int | None) -> tuple[int, int]:
    if isinstance(cmd, Claimed):
        return cmd.id, cmd.attempt if attempt is None else attempt
    assert attempt is not None, "pass the attempt with a bare command id"
    return cmd, attempt


@dataclass
class Tenant:
    uid: str
    conn: psycopg2.extensions.connection

    def session(self, name: str | None = None) -> str:
        return str(one(self.conn, "SELECT shell_api.create_session(%s)", (name,)))

    def submit(self, session_id: str, command: str) -> int:
        return int(one(self.conn, "SELECT shell_api.submit_command(%s, %s)", (session_id, command)))

    def cancel(self, command_id: int) -> bool:
        return bool(one(self.conn, "SELECT shell_api.cancel_command(%s)", (command_id,)))


def new_tenant(dsn: str, name: str, *, max_running: int | None = None,
               max_sessions: int | None = None, max_queued: int | None = None) -> Tenant:
    uid = create_user(dsn, name)
    if (max_running, max_sessions, max_queued) != (None, None, None):
        set_quota(dsn, name, max_running=max_running, max_sessions=max_sessions,
                  max_queued=max_queued)
    return Tenant(uid, tenant(dsn, uid))


def set_quota(dsn: str, name: str, *, max_running: int | None = None,
              max_sessions: int | None = None, max_queued: int | None = None) -> None:
    admin = connect_as(dsn, "shell_admin")
    try:
        call(admin, "SELECT * FROM shell.set_user_quota(%s, %s, %s, %s)",
             (name, max_sessions, max_running, max_queued))
    finally:
        admin.close()


def superuser(dsn: str) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn


def command_row(conn: psycopg2.extensions.connection, command_id: int) -> dict[str, Any]:
    rows = call(conn, "SELECT c.*, shell.output_of(c) AS output FROM shell.commands c"
                    " WHERE id = %s", (command_id,))
    assert len(rows) == 1, rows
    return rows[0]


def expire_lease(su: psycopg2.extensions.connection, command_id: int) -> None:
    """Moves a command's lease into the past, as if its worker had gone quiet."""
    call(su,
         "UPDATE shell.commands SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
         (command_id,))


@contextlib.contextmanager
def raises_sqlstate(sqlstate: str, message: str | None = None) -> Iterator[pytest.ExceptionInfo]:
    with pytest.raises(psycopg2.Error) as info:
        yield info
    assert info.value.pgcode == sqlstate, (info.value.pgcode, str(info.value))
    if message is not None:
        assert message in info.value.diag.message_primary, info.value.diag.message_primary


# The watchers' invariant: the lane's bookkeeping agrees with the commands,
# and no session has two active commands.
LANE_MISMATCHES = """
SELECT l.session_id, l.pending, l.active_command_id,
       (SELECT count(*) FROM shell.commands c
        WHERE c.session_id = l.session_id AND c.status = 'pending') AS real_pending,
       (SELECT array_agg(c.id) FROM shell.commands c
        WHERE c.session_id = l.session_id AND c.status IN ('claimed', 'running')) AS real_active
FROM shell.lanes l
WHERE l.pending <> (SELECT count(*) FROM shell.commands c
                    WHERE c.session_id = l.session_id AND c.status = 'pending')
   OR l.active_command_id IS DISTINCT FROM (SELECT min(c.id) FROM shell.commands c
        WHERE c.session_id = l.session_id AND c.status IN ('claimed', 'running'))
   OR (SELECT count(*) FROM shell.commands c
       WHERE c.session_id = l.session_id AND c.status IN ('claimed', 'running')) > 1
"""


class Samples:
    """Counts a watcher's completed samples, so a worker can hold a command
    until the watcher has looked at the database with that command active."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.taken = 0

    def took_one(self) -> None:
        with self._cond:
            self.taken += 1
            self._cond.notify_all()

    def wait_for_a_fresh_one(self, stop: threading.Event) -> None:
        # The sample in progress may have begun before the caller's change
        # committed; the one after it began later.
        with self._cond:
            target = self.taken + 2
            while self.taken < target and not stop.is_set():
                self._cond.wait(0.5)


def blocks_or_ends(su: psycopg2.extensions.connection, conn: psycopg2.extensions.connection,
                   work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Starts ``work`` on ``conn`` in a thread and returns once it either
    finished or waits for a lock another transaction holds."""
    pid = conn.get_backend_pid()
    result: list[Any] = []

    def target() -> None:
        try:
            result.append(work())
        except psycopg2.Error as exc:
            result.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    wait_for("the statement to finish or to wait for a lock", lambda: not thread.is_alive() or one(
        su, "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)))
    return thread, result
