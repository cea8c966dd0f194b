"""A listing call costs what it returns, not the size of the tree it lists
(0026_bounded_capture): session_files pages with a keyset cursor, and the
change summary under a command reads a bounded number of changes. The cost
is counted in rows of shell.tree_entries read by the call (PostgreSQL's own
per-transaction statistics), never timed."""

from __future__ import annotations

import hashlib
import json

import pytest

from executor.workspace.tree import tree_hash
from tests.db.claim_support import new_tenant, superuser
from tests.support import call, executor, one

BIG = 9_000  # entries of one directory (within a tree's cap): reading them all shows


READ = ("SELECT coalesce(sum(idx_tup_fetch + seq_tup_read), 0)::bigint"
        " FROM pg_stat_xact_user_tables WHERE schemaname = 'shell' AND relname = 'tree_entries'")


def entries_read(conn, statement: str, params: tuple) -> tuple[list[dict], int]:
    """The rows of ``statement`` and how many tree entries it read: the
    backend's not yet reported counts, before and after, in one transaction
    (they are reported only between transactions)."""
    with conn.cursor() as cur:
        cur.execute("BEGIN")
    try:
        before = one(conn, READ)
        rows = call(conn, statement, params)
        read = one(conn, READ) - before
    finally:
        with conn.cursor() as cur:
            cur.execute("COMMIT")
    return rows, read


def store_tree(dsn: str, paths: dict[str, str]) -> str:
    """Stores a tree of these paths (kind "file" or "dir"; files all hold b"x")
    with the executor's own calls; returns its root hash."""
    worker = executor(dsn)
    blob = hashlib.sha256(b"x").hexdigest()
    call(worker, "SELECT shell.put_blob_chunk(%s, 1, 1, 0, %s)", (blob, b"x"))
    trees: list[list[dict]] = []

    def tree_of(directory: str) -> tuple[str, int]:
        """(hash, size) of ``directory`` ("" the root), its subtrees first in ``trees``."""
        rows = []
        for path, kind in paths.items():
            parent, _, name = path.rpartition("/")
            if parent != directory:
                continue
            sub, size = tree_of(path) if kind == "dir" else (blob, 1)
            rows.append({"name": name, "kind": kind, "mode": 0o755 if kind == "dir" else 0o644,
                         "size": size, "object": sub, "target": None})
        trees.append(rows)
        return tree_hash(rows), sum(r["size"] for r in rows)

    root, _size = tree_of("")
    one(worker, "SELECT shell.put_trees(%s::jsonb)", (json.dumps(trees),))
    worker.close()
    return root


@pytest.fixture
def big_session(db):
    """A tenant's session whose root holds a directory of BIG files and a few
    names that sort around a directory's own ("a", "a-c", "a/b", "a0")."""
    alice = new_tenant(db, "alice")
    session = alice.session()
    paths = {"a": "dir", "a/b": "file", "a-c": "file", "a0": "file", "big": "dir",
             **{f"big/f{i:05d}": "file" for i in range(BIG)}, "z": "file"}
    root = store_tree(db, paths)
    superuser(db).cursor().execute("UPDATE shell.sessions SET root = %s WHERE id = %s",
                                   (root, session))
    return alice, session, paths


def test_a_page_of_session_files_reads_what_it_returns(big_session):
    alice, session, _paths = big_session
    rows, read = entries_read(
        alice.conn, "SELECT * FROM shell_api.session_files(%s, p_limit => 1)", (session,))
    assert [r["path"] for r in rows] == ["a"]
    assert read <= 5, f"one row of session_files read {read} tree entries"
    # A page that resumes inside the big directory reads about as much.
    rows, read = entries_read(
        alice.conn, "SELECT * FROM shell_api.session_files(%s, NULL, 'big/f01234', 3)",
        (session,))
    assert [r["path"] for r in rows] == ["big/f01235", "big/f01236", "big/f01237"]
    assert read <= 10, f"three rows of session_files read {read} tree entries"


def test_session_files_pages_through_the_whole_tree_once_in_order(big_session):
    alice, session, paths = big_session
    listed: list[str] = []
    after = None
    while True:
        page = call(alice.conn, "SELECT * FROM shell_api.session_files(%s, NULL, %s, 1000)",
                    (session, after))
        assert len(page) <= 1000
        listed += [r["path"] for r in page]
        if len(page) < 1000:
            break
        after = page[-1]["path"]
    assert sorted(listed) == sorted(paths) and len(listed) == len(set(listed))
    # Names in byte order, each directory followed by what it holds.
    assert listed[:5] == ["a", "a/b", "a-c", "a0", "big"] and listed[-1] == "z"
    # A cursor whose path is gone pages on from where it would be.
    page = call(alice.conn, "SELECT path FROM shell_api.session_files(%s, NULL, 'a/zz/gone', 2)",
                (session,))
    assert [r["path"] for r in page] == ["a-c", "a0"]


def test_session_files_refuses_a_page_too_large_or_a_bad_cursor(big_session):
    alice, session, _paths = big_session
    import psycopg2

    for after, limit in ((None, 0), (None, 1001), ("../x", 10)):
        with pytest.raises(psycopg2.Error) as failure:
            call(alice.conn, "SELECT * FROM shell_api.session_files(%s, NULL, %s, %s)",
                 (session, after, limit))
        assert failure.value.pgcode == "22023"


def test_the_change_summary_of_a_huge_change_reads_a_bounded_part_of_it(big_session, db):
    alice, session, _paths = big_session
    # A history entry whose files went from nothing to the big tree.
    upload = one(alice.conn, "SELECT shell_api.upload_file(%s, 'y', 'y')", (alice.session(),))
    big_root = one(superuser(db), "SELECT root FROM shell.sessions WHERE id = %s", (session,))
    superuser(db).cursor().execute(
        "UPDATE shell.commands SET root_before = shell.empty_tree(), root_after = %s"
        " WHERE id = %s", (big_root, upload))
    rows, read = entries_read(
        alice.conn, "SELECT shell.render_changes(c) AS html FROM shell.commands c WHERE c.id = %s",
        (upload,))
    html = rows[0]["html"]
    assert "<summary>more than 1000 changes</summary>" in html
    assert html.count("<li class=\"added\">") == 100
    assert read < BIG / 2, f"the summary read {read} tree entries of a {BIG}-entry change"
