"""A 429's hint names the seconds to wait in words a person reads ("1
second", "30 seconds"); clients read the number from it."""

from __future__ import annotations

import psycopg2

from tests.support import one


def test_the_hint_says_second_or_seconds(db):
    with psycopg2.connect(db) as conn:
        hints = [one(conn, "SELECT shell.respond(429, 'PT429', 'slow down', %s) ->> 'hint'", (n,))
                 for n in (1, 30)]
        no_wait = one(conn, "SELECT shell.respond(409, 'PT409', 'no') ->> 'hint'")
    conn.close()
    assert hints == ["Try again in 1 second.", "Try again in 30 seconds."]
    assert no_wait is None
