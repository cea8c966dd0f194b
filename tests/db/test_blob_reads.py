"""Blobs go in and come out as binary COPY (executor/db/workspace.py),
against the real database as the executor role: every blob's bytes come
back exactly, large ones joined from their chunks, what is not stored is
left out, and the executor may stage blobs in a temporary table even where
PUBLIC may not; staged, they are not compressed (only where they are kept,
with lz4)."""

from __future__ import annotations

import hashlib
import io
import os
import uuid

import pytest

from executor.db import migrations
from executor.db.connection import connect, query
from executor.db.queue import ExecutorDatabase
from executor.db.workspace import WorkspaceStore, binary_rows
from executor.errors import DatabaseError
from tests.conftest import with_database

CHUNK = 4 * 1024 * 1024


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_blobs_come_back_byte_for_byte(db: str) -> None:
    store = WorkspaceStore(ExecutorDatabase(db, "shell_executor"))
    small = [b"", b"\0\xff\r\n" * 3, "ünïcode\n".encode(), os.urandom(100_000)]
    store.put_blobs([(sha(data), data) for data in small])
    large = os.urandom(CHUNK + 12_345)  # two chunks
    for seq in range(2):
        store.put_blob_chunk(sha(large), len(large), 2, seq, large[seq * CHUNK:(seq + 1) * CHUNK])
    missing = "0" * 64
    found = store.blobs([sha(data) for data in small[1:]] + [sha(large), missing])
    assert found == {**{sha(data): data for data in small[1:]}, sha(large): large}


def copy_out(conn, query: str) -> bytes:
    sink = io.BytesIO()
    with conn.cursor() as cur:
        cur.copy_expert(f"COPY ({query}) TO STDOUT (FORMAT binary)", sink)
    return sink.getvalue()


def test_output_that_is_not_whole_binary_copy_of_non_nulls_is_refused(conn) -> None:
    with pytest.raises(ValueError, match="not the output of COPY"):
        list(binary_rows(b"sha256,data\n"))
    with pytest.raises(ValueError, match="NULL"):
        list(binary_rows(copy_out(conn, "SELECT 'a'::text, NULL::bytea")))
    whole = copy_out(conn, "SELECT 'a'::text, '\\x0102'::bytea")
    assert list(binary_rows(whole)) == [[b"a", b"\x01\x02"]]
    for cut in range(len(whole)):  # wherever it is cut, it is refused
        with pytest.raises(ValueError):
            list(binary_rows(whole[:cut]))


def test_blobs_are_stored_where_public_may_make_no_temporary_table(admin_dsn: str) -> None:
    # A hardened database: PUBLIC loses TEMPORARY before the schema is
    # migrated in; the executor's own grant (sql/grants.sql) stays.
    name = f"pgshell_b_{uuid.uuid4().hex[:12]}"
    admin = connect(admin_dsn)
    query(admin, f'CREATE DATABASE "{name}"')
    try:
        dsn = with_database(admin_dsn, name)
        conn = connect(dsn)
        try:
            query(conn, f'REVOKE TEMPORARY ON DATABASE "{name}" FROM PUBLIC')
            migrations.migrate(conn)
        finally:
            conn.close()
        store = WorkspaceStore(ExecutorDatabase(dsn, "shell_executor"))
        data = b"stored\n"
        store.put_blobs([(sha(data), data)])
        assert store.blobs([sha(data)]) == {sha(data): data}
    finally:
        query(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def test_staged_bytes_are_not_compressed_twice_and_a_failed_first_call_costs_nothing(
        db: str) -> None:
    executor = ExecutorDatabase(db, "shell_executor")
    store = WorkspaceStore(executor)
    text = b"the same line of text, over and over\n" * 30_000  # compresses well
    # The first call on the connection fails (a wrong hash): the staging
    # table it made goes with its transaction, and the next call makes it again.
    with pytest.raises(DatabaseError, match="not the SHA-256"):
        store.put_blobs([(sha(b"something else"), text)])
    WorkspaceStore(executor).put_blobs([(sha(text), text)])
    assert store.blobs([sha(text)]) == {sha(text): text}
    # Staged as they are: compressed once, where they are kept.
    [row] = executor.call("SELECT attstorage FROM pg_attribute "
                          "WHERE attrelid = 'pg_temp.blob_batch'::regclass AND attname = 'data'")
    assert row["attstorage"] == "e"
    admin = connect(db)
    try:
        [row] = query(admin, "SELECT pg_column_compression(data) AS method "
                             "FROM shell.blob_chunks WHERE sha256 = %s", (sha(text),))
    finally:
        admin.close()
    assert row["method"] == "lz4"  # migration 0049, on a server built with it
