"""An upload in parts (0023, 0028) is kept or dropped whole, finished once,
and bounded in the bytes a user may have staged: attacked as a tenant."""

from __future__ import annotations

import uuid

import psycopg2

from tests.db.claim_support import blocks_or_ends, new_tenant, raises_sqlstate, superuser
from tests.support import call, one, tenant

PART = b"a" * 1024


def stage(conn: psycopg2.extensions.connection, upload: str, seq: int, data: bytes) -> None:
    call(conn, "SELECT shell_api.upload_part(%s, %s, %s)", (upload, seq, data))


def finish(conn: psycopg2.extensions.connection, upload: str, session: str, path: str) -> int:
    return int(one(conn, "SELECT shell_api.upload_finish(%s, %s, %s)", (upload, session, path)))


def read(conn: psycopg2.extensions.connection, session: str, path: str) -> bytes:
    return bytes(one(conn, "SELECT shell_api.read_file(%s, %s)", (session, path)))


def test_a_slow_upload_keeps_its_first_parts_when_another_begins(db):
    """0023 dropped parts one by one by their own age, and the finish stored
    what was left: a slow upload lost its beginning."""
    alice = new_tenant(db, "alice")
    session = alice.session()
    su = superuser(db)
    slow = str(uuid.uuid4())
    stage(alice.conn, slow, 0, b"first ")
    call(su, "UPDATE shell.upload_parts SET created_at = now() - interval '2 hours'"
             " WHERE upload_id = %s", (slow,))
    stage(alice.conn, slow, 1, b"second")  # still arriving: its newest part is young
    stage(alice.conn, str(uuid.uuid4()), 0, PART)  # another upload begins
    call(su, "SELECT shell.collect_upload_parts()")
    finish(alice.conn, slow, session, "slow.txt")
    assert read(alice.conn, session, "slow.txt") == b"first second"


def test_an_abandoned_upload_goes_whole(db):
    alice = new_tenant(db, "alice")
    su = superuser(db)
    gone = str(uuid.uuid4())
    stage(alice.conn, gone, 0, PART)
    stage(alice.conn, gone, 1, PART)
    call(su, "UPDATE shell.upload_parts SET created_at = now() - interval '2 hours'"
             " WHERE upload_id = %s", (gone,))
    assert one(su, "SELECT shell.collect_upload_parts()") == 2
    with raises_sqlstate("22023", "comes out of order"):
        stage(alice.conn, gone, 2, PART)


def test_an_upload_missing_a_part_is_not_stored(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su = superuser(db)
    broken = str(uuid.uuid4())
    for seq in range(3):
        stage(alice.conn, broken, seq, PART)
    call(su, "DELETE FROM shell.upload_parts WHERE upload_id = %s AND seq = 0", (broken,))
    with raises_sqlstate("22023", "is missing parts"):
        finish(alice.conn, broken, session, "broken.txt")
    assert one(su, "SELECT count(*) FROM shell.commands WHERE session_id = %s", (session,)) == 0


def test_an_upload_finished_twice_at_once_is_stored_once(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su = superuser(db)
    upload = str(uuid.uuid4())
    stage(alice.conn, upload, 0, PART)
    first = tenant(db, alice.uid)
    first.autocommit = False
    finish(first, upload, session, "once.txt")
    second = tenant(db, alice.uid)
    thread, result = blocks_or_ends(su, second, lambda: finish(second, upload, session, "once.txt"))
    first.commit()
    thread.join(60)
    assert isinstance(result[0], psycopg2.Error), result
    assert result[0].pgcode == "22023" and "no upload" in str(result[0])
    assert one(su, "SELECT count(*) FROM shell.commands WHERE session_id = %s", (session,)) == 1


def test_staged_bytes_are_bounded_per_user(db):
    """0023 let a user stage eight whole uploads (512 MiB) outside every quota."""
    alice, bob = new_tenant(db, "alice"), new_tenant(db, "bob")
    su = superuser(db)
    call(su, "UPDATE shell.config SET value = %s WHERE key = 'upload_staged_max_bytes'",
         (str(3 * len(PART)),))
    for _ in range(3):
        stage(alice.conn, str(uuid.uuid4()), 0, PART)
    with raises_sqlstate("PT429", "too many bytes staged"):
        stage(alice.conn, str(uuid.uuid4()), 0, PART)
    stage(bob.conn, str(uuid.uuid4()), 0, PART)  # her bound is hers alone
