"""Stored files under a hostile tenant (0022): the files quota counts every
version that the kept history holds, a command cannot store past it, the
caps on entries hold, uploads are limited and serialized per user, every
way of queueing checks the stored quotas, and collection never takes a blob
an upload is about to refer to."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import psycopg2

from executor.workspace.tree import EMPTY_TREE
from tests.db.claim_support import (
    Worker,
    blocks_or_ends,
    command_row,
    new_tenant,
    raises_sqlstate,
    superuser,
)
from tests.support import call, executor, one, tenant

MIB = 1024 * 1024
ENTRY = 338  # what an entry with a one-letter name counts (shell.entry_bytes)


def set_files_quota(su: psycopg2.extensions.connection, username: str, **quota: int) -> None:
    """Sets users' columns by name (max_file_bytes, max_tree_entries, ...)."""
    for column, value in quota.items():
        call(su, f"UPDATE shell.users SET {column} = %s WHERE username = %s", (value, username))


def store_file(ex: psycopg2.extensions.connection, content: bytes) -> str:
    """The executor stores a blob (one chunk) and returns its hash."""
    digest = hashlib.sha256(content).hexdigest()
    call(ex, "SELECT shell.put_blob_chunk(%s, %s, 1, 0, %s)", (digest, len(content), content))
    return digest


def file_entry(name: str, digest: str, size: int) -> dict[str, Any]:
    return {"name": name, "kind": "file", "mode": 0o644, "size": size, "object": digest,
            "target": None}


def store_tree(ex: psycopg2.extensions.connection, entries: list[dict[str, Any]]) -> str:
    return str(one(ex, "SELECT (shell.put_trees(%s::jsonb))[1]", (json.dumps([entries]),)))


def counted(su: psycopg2.extensions.connection, uid: str) -> int:
    return int(one(su, "SELECT shell.user_file_bytes(%s)", (uid,)))


def walked(su: psycopg2.extensions.connection, uid: str) -> int:
    return int(one(su, "SELECT shell.file_bytes_walked(%s)", (uid,)))


def run_to(worker: Worker, root: str, output: str = "done\n") -> int:
    """Claims the next command and completes it as having left ``root``."""
    [cmd] = worker.claim()
    worker.start(cmd)
    worker.append(cmd, 0, output)
    worker.complete_with(cmd, json.dumps({"status": "done", "exit_code": 0, "duration_ms": 5,
                                          "root_after": root, "cwd_after": "/home/sandbox/made"}))
    return cmd.id


# -- commands -----------------------------------------------------------------------

def test_a_command_whose_files_pass_the_quota_fails_and_its_session_keeps_its_files(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su, ex = superuser(db), executor(db)
    set_files_quota(su, "alice", max_file_bytes=2 * MIB)
    worker = Worker(db, "w1")
    command = alice.submit(session, "head -c 3M /dev/urandom > big && cd made")
    big = os.urandom(3 * MIB)
    root = store_tree(ex, [file_entry("big", store_file(ex, big), len(big))])
    run_to(worker, root, "wrote 3 MiB\n")
    row = command_row(su, command)
    # The output and the exit status are kept; the files, cwd and env are not.
    assert (row["status"], row["exit_code"], row["output"]) == ("failed", 0, "wrote 3 MiB\n")
    assert row["reason"].startswith(f"files quota reached ({3 * MIB + 342} of {2 * MIB} bytes)")
    assert row["reason"].endswith("the command's changes to its files were not kept")
    assert row["root_before"] == row["root_after"] == EMPTY_TREE
    assert row["cwd_after"] == "/home/sandbox"
    s = call(su, "SELECT root, cwd FROM shell.sessions WHERE id = %s", (session,))[0]
    assert s == {"root": EMPTY_TREE, "cwd": "/home/sandbox"}
    assert call(alice.conn, "SELECT * FROM shell_api.session_files(%s)", (session,)) == []
    assert counted(su, alice.uid) == walked(su, alice.uid) == 0
    # The session goes on from the files it had, and within the quota a command stores its files.
    alice.submit(session, "echo small > f")
    small = store_tree(ex, [file_entry("f", store_file(ex, b"small\n"), 6)])
    done = run_to(worker, small)
    assert command_row(su, done)["status"] == "done"
    assert counted(su, alice.uid) == walked(su, alice.uid) == ENTRY + 6


def test_a_directory_or_a_home_past_its_entries_cap_is_not_kept(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su, ex = superuser(db), executor(db)
    set_files_quota(su, "alice", max_tree_entries=3, max_root_entries=5)
    worker = Worker(db, "w1")
    blob = store_file(ex, b"x")
    wide = store_tree(ex, [file_entry(f"f{i}", blob, 1) for i in range(4)])
    alice.submit(session, "touch f0 f1 f2 f3")
    first = run_to(worker, wide)
    assert command_row(su, first)["reason"].startswith(
        "a directory would hold 4 entries, more than the limit of 3 (max_tree_entries)")
    # Three a directory, but six below the home.
    sub = store_tree(ex, [file_entry(f"f{i}", blob, 1) for i in range(3)])
    deep = store_tree(ex, [{"name": "a", "kind": "dir", "mode": 0o755, "size": 3, "object": sub,
                            "target": None},
                           {"name": "b", "kind": "dir", "mode": 0o755, "size": 3, "object": sub,
                            "target": None}])
    alice.submit(session, "mkdir a b && touch {a,b}/f{0,1,2}")
    second = run_to(worker, deep)
    assert command_row(su, second)["reason"].startswith(
        "the home would hold 8 entries, more than the limit of 5 (max_root_entries)")
    assert one(su, "SELECT root FROM shell.sessions WHERE id = %s", (session,)) == EMPTY_TREE
    # Uploads are held to the same caps.
    for i in range(3):
        one(alice.conn, "SELECT shell_api.upload_file(%s, %s, 'x')", (session, f"u{i}"))
    with raises_sqlstate("PT413", "a directory would hold 4 entries"):
        call(alice.conn, "SELECT shell_api.upload_file(%s, 'u3', 'x')", (session,))


def test_storing_and_holding_a_root_reads_tree_entries_by_key_only(db):
    """What a completion does to the files (store the new trees, count their
    entries, weigh and hold the new root, let go of the old) follows keys:
    shell.tree_entries is never read whole, even where the planner takes it
    for small (a fresh test database; one filled faster than autovacuum
    analyzes it)."""
    alice = new_tenant(db, "alice")
    su, ex = superuser(db), executor(db)
    blob = store_file(ex, b"x")
    sub = store_tree(ex, [file_entry(f"f{i}", blob, 1) for i in range(50)])
    with su.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT (shell.put_trees(%s::jsonb))[1]", (json.dumps([[
            {"name": "d", "kind": "dir", "mode": 0o755, "size": 50, "object": sub, "target": None},
            file_entry("g", blob, 1)]]),))
        [(root,)] = cur.fetchall()
        cur.execute("SELECT shell.files_refusal(%s, NULL, %s)", (alice.uid, root))
        assert cur.fetchall() == [(None,)]
        cur.execute("SELECT shell.hold_root(%s, %s, 1), shell.hold_root(%s, %s, -1)",
                    (alice.uid, root, alice.uid, root))
        cur.execute("SELECT entries, widest FROM shell.trees WHERE hash = %s", (root,))
        assert cur.fetchall() == [(52, 50)]
        cur.execute("SELECT seq_scan FROM pg_stat_xact_user_tables"
                    " WHERE relid = 'shell.tree_entries'::regclass")
        assert cur.fetchall() == [(0,)]
        cur.execute("ROLLBACK")


# -- uploads ------------------------------------------------------------------------

def test_every_version_of_a_file_uploaded_again_counts(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su = superuser(db)
    set_files_quota(su, "alice", max_file_bytes=4 * MIB)
    for _ in range(3):
        one(alice.conn, "SELECT shell_api.upload_file(%s, 'f', %s)", (session, os.urandom(MIB)))
    # Three versions kept in the history, each root with its one entry: a fourth does not fit.
    over = f"files quota reached ({4 * MIB + 4 * ENTRY} of {4 * MIB} bytes)"
    with raises_sqlstate("PT413", over):
        call(alice.conn, "SELECT shell_api.upload_file(%s, 'f', %s)", (session, os.urandom(MIB)))
    assert counted(su, alice.uid) == walked(su, alice.uid) == 3 * MIB + 3 * ENTRY
    # The same content again stores nothing new: only its history entry.
    same = bytes(one(alice.conn, "SELECT shell_api.read_file(%s, 'f')", (session,)))
    one(alice.conn, "SELECT shell_api.upload_file(%s, 'f', %s)", (session, same))
    assert counted(su, alice.uid) == walked(su, alice.uid) == 3 * MIB + 3 * ENTRY
    # Past the quota, no command is queued either.
    set_files_quota(su, "alice", max_file_bytes=3 * MIB)
    with raises_sqlstate("PT429", "stored files quota reached"):
        alice.submit(session, "true")


def test_uploads_are_limited_per_minute(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su = superuser(db)
    set_files_quota(su, "alice", max_uploads_per_minute=3)
    for i in range(3):
        one(alice.conn, "SELECT shell_api.upload_file(%s, %s, 'x')", (session, f"f{i}"))
    with raises_sqlstate("PT429", "upload rate limit reached (3 uploads a minute)"):
        call(alice.conn, "SELECT shell_api.upload_file(%s, 'f3', 'x')", (session,))
    # Another tenant has a minute of her own.
    bob = new_tenant(db, "bob")
    assert one(bob.conn, "SELECT shell_api.upload_file(%s, 'f', 'x')", (bob.session(),)) > 0
    # The window moves on.
    call(su, "UPDATE shell.file_usage SET upload_window = now() - interval '61 seconds' "
             "WHERE user_id = %s", (alice.uid,))
    assert one(alice.conn, "SELECT shell_api.upload_file(%s, 'f3', 'x')", (session,)) > 0


def test_parallel_uploads_cannot_pass_the_quota_together(db):
    alice = new_tenant(db, "alice")
    first, second = alice.session(), alice.session()
    su = superuser(db)
    set_files_quota(su, "alice", max_file_bytes=MIB)
    holding = tenant(db, alice.uid)
    holding.autocommit = False
    one(holding, "SELECT shell_api.upload_file(%s, 'a', %s)", (first, os.urandom(600 * 1024)))
    other = tenant(db, alice.uid)
    thread, result = blocks_or_ends(su, other, lambda: one(
        other, "SELECT shell_api.upload_file(%s, 'b', %s)", (second, os.urandom(600 * 1024))))
    holding.commit()
    thread.join(60)
    assert isinstance(result[0], psycopg2.Error), result
    assert result[0].pgcode == "PT413" and "files quota reached" in str(result[0])
    assert counted(su, alice.uid) == walked(su, alice.uid) == 600 * 1024 + ENTRY


def test_an_upload_into_a_session_whose_files_are_not_in_the_database_is_refused(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su = superuser(db)
    # A session from before the workspace: its files are on a host until its next command.
    call(su, "UPDATE shell.sessions SET root = NULL WHERE id = %s", (session,))
    with raises_sqlstate("PT409", "the session's files are not in the database yet"):
        call(alice.conn, "SELECT shell_api.upload_file(%s, 'a', 'x')", (session,))
    assert one(su, "SELECT root FROM shell.sessions WHERE id = %s", (session,)) is None
    assert one(su, "SELECT count(*) FROM shell.commands WHERE session_id = %s", (session,)) == 0


def test_collection_never_takes_a_blob_an_upload_is_about_to_refer_to(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su = superuser(db)
    content = b"left over from a history retention removed"
    digest = hashlib.sha256(content).hexdigest()
    # Stored long ago, referred to by nothing kept: collectable, until an upload of the same bytes.
    call(su, "INSERT INTO shell.blobs (sha256, size, chunks, created_at) "
             "VALUES (%s, %s, 1, now() - interval '2 hours')", (digest, len(content)))
    call(su, "INSERT INTO shell.blob_chunks VALUES (%s, 0, %s)", (digest, content))
    uploading = tenant(db, alice.uid)
    uploading.autocommit = False
    one(uploading, "SELECT shell_api.upload_file(%s, 'f', %s)", (session, content))
    collector = superuser(db)
    thread, result = blocks_or_ends(su, collector, lambda: call(
        collector, "SELECT * FROM shell.collect_files('1 minute')"))
    uploading.commit()
    thread.join(60)
    assert result == [[{"trees": 0, "blobs": 0}]], result
    assert bytes(one(alice.conn, "SELECT shell_api.read_file(%s, 'f')", (session,))) == content


def test_collection_keeps_what_a_tree_in_its_grace_period_refers_to(db):
    su, ex = superuser(db), executor(db)
    blob = store_file(ex, b"inner")
    inner = store_tree(ex, [file_entry("f", blob, 5)])
    outer = store_tree(ex, [{"name": "d", "kind": "dir", "mode": 0o755, "size": 5,
                             "object": inner, "target": None}])
    call(su, "UPDATE shell.trees SET created_at = now() - interval '2 hours' WHERE hash = %s",
         (inner,))
    call(su, "UPDATE shell.blobs SET created_at = now() - interval '2 hours'")
    # The outer tree is young (an executor stored it for a command not completed yet).
    assert call(su, "SELECT * FROM shell.collect_files('1 hour')") == [{"trees": 0, "blobs": 0}]
    assert one(su, "SELECT count(*) FROM shell.trees WHERE hash IN (%s, %s)", (inner, outer)) == 2


# -- queueing -----------------------------------------------------------------------

def test_replaying_gets_the_same_429_as_submitting_past_the_output_quota(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su = superuser(db)
    worker = Worker(db, "w1")
    command = alice.submit(session, "yes | head -c 1M")
    [cmd] = worker.claim()
    worker.start(cmd)
    worker.append(cmd, 0, "y" * MIB)
    worker.complete(cmd)
    call(su, "UPDATE shell.users SET max_output_bytes = %s WHERE username = 'alice'", (MIB,))
    with raises_sqlstate("PT429", "stored output quota reached"):
        alice.submit(session, "yes | head -c 1M")
    sessions = one(su, "SELECT count(*) FROM shell.sessions")
    with raises_sqlstate("PT429", "stored output quota reached"):
        call(alice.conn, "SELECT shell_api.replay_session(%s, %s)", (session, command))
    assert one(su, "SELECT count(*) FROM shell.sessions") == sessions
    assert one(su, "SELECT count(*) FROM shell.commands WHERE status = 'pending'") == 0


# -- the count ------------------------------------------------------------------------

def test_the_count_follows_commands_forks_replays_and_retention_as_a_walk_would(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    su, ex = superuser(db), executor(db)
    worker = Worker(db, "w1")
    a, b = store_file(ex, b"a" * 100), store_file(ex, b"b" * 200)
    sub = store_tree(ex, [file_entry("a", a, 100), file_entry("b", b, 200)])
    roots = [
        store_tree(ex, [file_entry("a", a, 100)]),
        store_tree(ex, [{"name": "d", "kind": "dir", "mode": 0o755, "size": 300, "object": sub,
                         "target": None}, file_entry("a", a, 100)]),
        store_tree(ex, [{"name": "d", "kind": "dir", "mode": 0o755, "size": 300, "object": sub,
                         "target": None}, {"name": "e", "kind": "dir", "mode": 0o755,
                                           "size": 300, "object": sub, "target": None}]),
    ]
    ids = []
    for root in roots:
        alice.submit(session, "change files")
        ids.append(run_to(worker, root))
        assert counted(su, alice.uid) == walked(su, alice.uid)
    upload = one(alice.conn, "SELECT shell_api.upload_file(%s, 'd/c', 'c')", (session,))
    fork = one(alice.conn, "SELECT shell_api.fork_session(%s)", (ids[1],))
    one(alice.conn, "SELECT shell_api.upload_file(%s, 'x', 'x')", (fork,))
    replay = one(alice.conn, "SELECT shell_api.replay_session(%s, %s)", (session, ids[1]))
    assert counted(su, alice.uid) == walked(su, alice.uid) > 0
    # Retention removes commands, a session's root moves: what is let go of leaves the count.
    call(su, "DELETE FROM shell.commands WHERE session_id = %s AND status = 'pending'", (replay,))
    call(su, "UPDATE shell.lanes SET pending = 0 WHERE session_id = %s", (replay,))
    call(su, "UPDATE shell.sessions SET forked_from_command_id = NULL WHERE id = %s", (fork,))
    removed = [ids[0], ids[1], upload]
    call(su, "DELETE FROM shell.output_chunks WHERE command_id = ANY (%s)", (removed,))
    call(su, "DELETE FROM shell.commands WHERE id = ANY (%s)", (removed,))
    assert counted(su, alice.uid) == walked(su, alice.uid)
    call(su, "UPDATE shell.sessions SET root = %s WHERE id IN (%s, %s)", (EMPTY_TREE, fork, replay))
    call(su, "DELETE FROM shell.commands WHERE session_id = %s", (fork,))
    assert counted(su, alice.uid) == walked(su, alice.uid)
    call(su, "DELETE FROM shell.output_chunks")
    call(su, "DELETE FROM shell.commands")
    call(su, "UPDATE shell.sessions SET root = %s", (EMPTY_TREE,))
    assert counted(su, alice.uid) == walked(su, alice.uid) == 0
    assert one(su, "SELECT count(*) FROM shell.held_trees WHERE tree <> %s", (EMPTY_TREE,)) == 0
    assert one(su, "SELECT count(*) FROM shell.held_blobs") == 0
    # Another tenant's count is her own: the same bytes count for each who holds them.
    bob = new_tenant(db, "bob")
    one(bob.conn, "SELECT shell_api.upload_file(%s, 'a', %s)", (bob.session(), b"a" * 100))
    assert counted(su, bob.uid) == ENTRY + 100 and counted(su, alice.uid) == 0
