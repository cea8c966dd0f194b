"""Warm-start requests (0018, 0019): a new session, or one a client opens,
is announced on shell_sessions, and exactly one executor takes each request,
however many share the preferred host; a tenant's asks are limited, so no
tenant can keep the executors' shared warm pools full."""

from __future__ import annotations

import select

import psycopg2.extensions

from tests.db.claim_support import new_tenant
from tests.support import call, executor, one


def adopt(conn: psycopg2.extensions.connection, session: str, host: str) -> bool:
    return bool(one(conn, "SELECT shell.adopt_session(%s, %s)", (session, host)))


def listening(db: str) -> psycopg2.extensions.connection:
    conn = executor(db)
    with conn.cursor() as cur:
        cur.execute("LISTEN shell_sessions")
    return conn


def announced(listener: psycopg2.extensions.connection) -> list[str]:
    """The sessions announced since the last call."""
    select.select([listener], [], [], 0.5)
    listener.poll()
    payloads = [n.payload for n in listener.notifies if n.channel == "shell_sessions"]
    listener.notifies.clear()
    return payloads


def test_each_request_is_taken_by_one_executor_of_the_preferred_host(db: str) -> None:
    alice = new_tenant(db, "alice")
    first, second, elsewhere = executor(db), executor(db), executor(db)
    session = alice.session("new")
    # A new session wants one: the first executor to ask takes it, and its
    # host becomes the preferred one; the others get nothing.
    assert adopt(first, session, "host-a")
    assert not adopt(second, session, "host-a")
    assert not adopt(elsewhere, session, "host-b")
    # Opened by its owner: a new request, for the preferred host only.
    call(alice.conn, "SELECT shell_api.warm_session(%s)", (session,))
    assert not adopt(elsewhere, session, "host-b")
    assert adopt(second, session, "host-a")
    assert not adopt(first, session, "host-a")


def test_a_tenants_asks_are_limited(db: str) -> None:
    alice = new_tenant(db, "alice")
    sessions = [alice.session(f"s{i}") for i in range(5)]
    listener = listening(db)
    announced(listener)
    for session in sessions:
        call(alice.conn, "SELECT shell_api.warm_session(%s)", (session,))
    call(alice.conn, "SELECT shell_api.warm_session(%s)", (sessions[0],))  # again at once
    # Three sessions a minute, each at most every 5 s; the rest do nothing.
    assert announced(listener) == sessions[:3]
    # Someone else's asks are their own.
    bob = new_tenant(db, "bob")
    theirs = bob.session("b")
    assert announced(listener) == [theirs]  # a new session is announced too
    call(bob.conn, "SELECT shell_api.warm_session(%s)", (theirs,))
    assert announced(listener) == [theirs]


def test_a_busy_session_is_not_announced(db: str) -> None:
    alice = new_tenant(db, "alice")
    session = alice.session("busy")
    listener = listening(db)
    call(alice.conn, "SELECT shell_api.submit_command(%s, 'sleep 1')", (session,))
    announced(listener)
    call(alice.conn, "SELECT shell_api.warm_session(%s)", (session,))
    assert announced(listener) == []
