"""Restoring a session's files checks each blob against its SHA-256: a blob
altered in the database (as superuser) makes the restore fail with the
reason, and the command that needed it fails instead of seeing altered
bytes. Through the real daemon, engine and image."""

from __future__ import annotations

import hashlib

import psycopg2

from tests.executor.conftest import Shell
from tests.support import call, create_user, one

UPLOADED = b"uploaded bytes\n"


def test_a_blob_altered_in_the_database_fails_the_restore_with_the_reason(db, daemon):
    shell = Shell(db, create_user(db, "alice"))
    assert shell.run("echo here > f")["status"] == "done"
    # The upload is in the database only: the next command restores it on this host.
    one(shell.conn, "SELECT shell_api.upload_file(%s, 'in/data.txt', %s, 420)",
        (shell.session_id, UPLOADED))
    digest = hashlib.sha256(UPLOADED).hexdigest()
    attacker = psycopg2.connect(db)
    attacker.autocommit = True
    try:
        call(attacker, "UPDATE shell.blob_chunks SET data = %s WHERE sha256 = %s",
             (b"UPLOADED BYTES\n", digest))
        row = shell.run("cat in/data.txt")
        assert (row["status"], row["output"]) == ("failed", ""), row
        assert "could not be restored" in row["reason"], row["reason"]
        assert f"blob {digest}" in row["reason"] and "altered" in row["reason"], row["reason"]
        # Put right, the same session restores and runs again.
        call(attacker, "UPDATE shell.blob_chunks SET data = %s WHERE sha256 = %s",
             (UPLOADED, digest))
        row = shell.run("cat in/data.txt f")
        assert (row["status"], row["output"]) == ("done", "uploaded bytes\nhere\n"), row
    finally:
        attacker.close()
        shell.conn.close()


def test_small_blobs_read_together_are_each_checked(db, daemon):
    # A new host's first command restores many small files (read many
    # blobs to a call) and one past a chunk (read a chunk at a time).
    shell = Shell(db, create_user(db, "bob"))
    made = shell.run("for i in $(seq 40); do echo file $i > f$i; done; "
                     "head -c 5000000 /dev/zero | tr '\\0' x > big")
    assert made["status"] == "done", made
    last = one(shell.conn, "SELECT max(id) FROM shell.commands WHERE session_id = %s",
               (shell.session_id,))
    digest = hashlib.sha256(b"file 17\n").hexdigest()
    attacker = psycopg2.connect(db)
    attacker.autocommit = True
    try:
        call(attacker, "UPDATE shell.blob_chunks SET data = %s WHERE sha256 = %s",
             (b"file 71\n", digest))
        shell.session_id = one(shell.conn, "SELECT shell_api.fork_session(%s)", (last,))
        row = shell.run("cat f1")
        assert row["status"] == "failed" and f"blob {digest}" in row["reason"], row
        call(attacker, "UPDATE shell.blob_chunks SET data = %s WHERE sha256 = %s",
             (b"file 17\n", digest))
        row = shell.run("cat f1 f17 f40; wc -c < big")
        assert (row["status"], row["output"]) == (
            "done", "file 1\nfile 17\nfile 40\n5000000\n"), row
    finally:
        attacker.close()
        shell.conn.close()
