"""The workspace's SQL (0011_workspace): tree hashes agree with the
executor's, stored trees must be complete, and the tenant API keeps to the
caller's own session and the session's own tree."""

from __future__ import annotations

import json

import psycopg2
import pytest

from executor.workspace.tree import EMPTY_TREE, tree_hash
from tests.db.claim_support import new_tenant, raises_sqlstate, superuser
from tests.support import call, connect_as, executor, one

BLOB = "ab" * 32


def test_sql_and_python_hash_trees_alike(db):
    su = superuser(db)
    entries = [
        {"name": "ünï code", "kind": "file", "mode": 0o644, "size": 3,
         "object": BLOB, "target": None},
        {"name": "new\nline", "kind": "symlink", "mode": 0o777, "size": 0,
         "object": None, "target": "../x y"},
        {"name": "B", "kind": "dir", "mode": 0o700, "size": 0,
         "object": EMPTY_TREE, "target": None},
        {"name": "a", "kind": "file", "mode": 0o600, "size": 0, "object": BLOB, "target": None},
    ]
    assert one(su, "SELECT shell.tree_hash(%s::jsonb)",
               (json.dumps(entries),)) == tree_hash(entries)
    assert one(su, "SELECT shell.empty_tree()") == EMPTY_TREE


def test_a_tree_is_stored_only_when_what_it_refers_to_is(db):
    ex = executor(db)
    missing = [{"name": "f", "kind": "file", "mode": 420, "size": 3, "object": BLOB,
                "target": None}]
    with raises_sqlstate("22023", "refers to nothing stored"):
        one(ex, "SELECT shell.put_trees(%s::jsonb)", (json.dumps([missing]),))
    digest = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"  # sha256("hello")
    one(ex, "SELECT shell.put_blob_chunk(%s, 5, 1, 0, %s)", (digest, b"hello"))
    good = [{**missing[0], "object": digest, "size": 5}]
    wrong_size = [{**missing[0], "object": digest, "size": 4}]
    with raises_sqlstate("22023"):
        one(ex, "SELECT shell.put_trees(%s::jsonb)", (json.dumps([wrong_size]),))
    assert one(ex, "SELECT shell.put_trees(%s::jsonb)",
               (json.dumps([good, good]),)) == [tree_hash(good)] * 2


def test_tenants_reach_only_their_own_files(db):
    alice, bob = new_tenant(db, "alice"), new_tenant(db, "bob")
    mine = alice.session()
    one(alice.conn, "SELECT shell_api.upload_file(%s, 'secret', %s)", (mine, b"alice's"))
    assert bytes(one(alice.conn, "SELECT shell_api.read_file(%s, 'secret')", (mine,))) == b"alice's"
    for sql in ("SELECT shell_api.read_file(%s, 'secret')",
                "SELECT * FROM shell_api.session_files(%s)",
                "SELECT shell_api.upload_file(%s, 'x', '\\x00')"):
        with raises_sqlstate("22023", "session not found"):
            call(bob.conn, sql, (mine,))
    upload = one(su := superuser(db), "SELECT max(id) FROM shell.commands")
    with raises_sqlstate("22023", "command not found"):
        call(bob.conn, "SELECT * FROM shell_api.command_changes(%s)", (upload,))
    anon = connect_as(db, "shell_user", {"role": "shell_user"})
    with raises_sqlstate("42501"):
        call(anon, "SELECT shell_api.read_file(%s, 'secret')", (mine,))
    with pytest.raises(psycopg2.Error):  # the tables themselves are not the tenant's to read
        call(alice.conn, "SELECT * FROM shell.blob_chunks")
    su.close()


@pytest.mark.parametrize("path",
                         ["/etc/passwd", "../secret", "a/../../secret", "a//b", "", "./x", "x/"])
def test_paths_outside_the_home_are_refused(db, path):
    alice = new_tenant(db, "alice")
    session = alice.session()
    with raises_sqlstate("22023", "invalid path"):
        call(alice.conn, "SELECT shell_api.read_file(%s, %s)", (session, path))
    with raises_sqlstate("22023", "invalid path"):
        call(alice.conn, "SELECT shell_api.upload_file(%s, %s, 'x')", (session, path))


def test_uploads_past_the_quota_store_nothing(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su = superuser(db)
    # An entry of a tree counts about what it takes in the database (338
    # bytes with a one-letter name), a file's content its size.
    su.cursor().execute("UPDATE shell.users SET max_file_bytes = 1000 WHERE username = 'alice'")
    one(alice.conn, "SELECT shell_api.upload_file(%s, 'a', %s)", (session, b"12345678"))
    blobs = one(su, "SELECT count(*) FROM shell.blobs")
    with raises_sqlstate("PT413", "files quota reached (1027 of 1000 bytes)"):
        call(alice.conn, "SELECT shell_api.upload_file(%s, 'b', %s)", (session, b"12345"))
    assert one(su, "SELECT count(*) FROM shell.blobs") == blobs
    assert [r["path"] for r in call(alice.conn, "SELECT * FROM shell_api.session_files(%s)",
                                    (session,))] == ["a"]


def test_an_upload_waits_for_an_idle_session(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    alice.submit(session, "sleep 1")
    with raises_sqlstate("PT409", "busy"):
        call(alice.conn, "SELECT shell_api.upload_file(%s, 'a', 'x')", (session,))


def test_retention_removes_only_what_nothing_retained_reaches(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su = superuser(db)
    first = one(alice.conn, "SELECT shell_api.upload_file(%s, 'd/old', %s)", (session, b"old"))
    second = one(alice.conn, "SELECT shell_api.upload_file(%s, 'd/old', %s)", (session, b"new"))
    fork = one(alice.conn, "SELECT shell_api.fork_session(%s)", (first,))
    # Both history entries are retained (their roots reach "old"), and the
    # fork's root too: nothing may go yet.
    assert call(su, "SELECT * FROM shell.collect_files('0')") == [{"trees": 0, "blobs": 0}]
    # Without the entries and the fork, "old" and its trees are unreachable.
    su.cursor().execute("UPDATE shell.sessions SET forked_from_command_id = NULL, root = NULL "
                        "WHERE id = %s", (fork,))
    su.cursor().execute("DELETE FROM shell.commands WHERE id IN (%s, %s)", (first, second))
    result = call(su, "SELECT * FROM shell.collect_files('0')")[0]
    assert result["blobs"] == 1 and result["trees"] >= 2
    assert bytes(one(alice.conn, "SELECT shell_api.read_file(%s, 'd/old')", (session,))) == b"new"
    # Within the grace period, nothing is taken.
    one(alice.conn, "SELECT shell_api.upload_file(%s, 'd/old', %s)", (session, b"newer"))
    assert call(su, "SELECT * FROM shell.collect_files('1 hour')") == [{"trees": 0, "blobs": 0}]


def test_claiming_prefers_the_host_whose_copy_is_current_for_a_short_grace(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    here, there = executor(db), executor(db)

    def claim(conn, host: str, grace_ms: int) -> list:
        return call(conn, "SELECT command_id, root "
                          "FROM shell.claim_commands('w-' || %s, 1, 30, %s, %s)",
                    (host, host, grace_ms))

    su = superuser(db)
    su.cursor().execute("UPDATE shell.lanes SET cached_on = 'here' WHERE session_id = %s",
                        (session,))
    first = alice.submit(session, "echo 1")
    # within the grace: left to the host holding the files
    assert claim(there, "there", 10_000) == []
    assert [r["command_id"] for r in claim(here, "here", 10_000)] == [first]
    su.cursor().execute("UPDATE shell.commands SET status = 'cancelled', completed_at = now() "
                        "WHERE id = %s", (first,))
    su.cursor().execute("UPDATE shell.lanes SET active_command_id = NULL WHERE session_id = %s",
                        (session,))
    second = alice.submit(session, "echo 2")
    # no grace: anyone takes it
    assert [r["command_id"] for r in claim(there, "there", 0)] == [second]
    with raises_sqlstate("22023", "p_grace_ms"):
        claim(there, "there", -1)


def test_an_upload_never_replaces_a_directory(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    one(alice.conn, "SELECT shell_api.upload_file(%s, 'd/inside', 'x')", (session,))
    with raises_sqlstate("22023", "d is a directory"):
        call(alice.conn, "SELECT shell_api.upload_file(%s, 'd', 'y')", (session,))
    with raises_sqlstate("22023", "not a directory"):
        call(alice.conn, "SELECT shell_api.upload_file(%s, 'd/inside/deeper', 'y')", (session,))
    assert [r["path"] for r in call(alice.conn, "SELECT * FROM shell_api.session_files(%s)",
                                    (session,))] == ["d", "d/inside"]


def test_changes_of_an_unfinished_command_are_refused(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    queued = alice.submit(session, "true")
    with raises_sqlstate("22023", "has not finished"):
        call(alice.conn, "SELECT * FROM shell_api.command_changes(%s)", (queued,))
