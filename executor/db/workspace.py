"""The workspace's side of the executor contract: blobs and trees in,
listings, differences and blob chunks out (their functions: sql/schema.sql)."""

from __future__ import annotations

import io
import struct
import weakref
from collections.abc import Iterator
from typing import Any

from executor.db.connection import json_param
from executor.db.queue import ExecutorDatabase

# What COPY ... (FORMAT binary) output starts with: a signature, 32 bits of
# flags and the length of a header extension (PostgreSQL's COPY docs).
COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\0"
COPY_HEADER = struct.Struct(">11sii")
FIELDS = struct.Struct(">h")  # a row's count of fields; -1 ends the output
SIZE = struct.Struct(">i")  # a field's length in bytes; -1 is NULL
# Made once a connection (before PostgreSQL 16, a column's storage is set
# by ALTER TABLE, which rewrites its catalog row), in one round trip.
STAGING_TABLE = """
DO $$BEGIN
    IF to_regclass('pg_temp.blob_batch') IS NULL THEN
        CREATE TEMPORARY TABLE blob_batch (sha256 text NOT NULL, data bytea NOT NULL)
            ON COMMIT DELETE ROWS;
        ALTER TABLE pg_temp.blob_batch ALTER COLUMN data SET STORAGE EXTERNAL;
    END IF;
END$$"""
# The connections that made it (a store lives for one command, a connection longer).
_STAGING: weakref.WeakSet[Any] = weakref.WeakSet()


class WorkspaceStore:
    """Workspace calls over one executor connection (retried like every call)."""

    def __init__(self, db: ExecutorDatabase) -> None:
        self._db = db

    def put_blobs(self, blobs: list[tuple[str, bytes]]) -> None:
        """Stores small blobs (each at most one chunk) in one call: (sha256, bytes)."""
        self._staged(blobs, "SELECT shell.put_blobs(array_agg(sha256), array_agg(data)) "
                            "FROM pg_temp.blob_batch")

    def put_blob_chunk(self, digest: str, size: int, chunks: int, seq: int, data: bytes) -> None:
        self._staged([(digest, data)], "SELECT shell.put_blob_chunk(sha256, %s, %s, %s, data) "
                                       "FROM pg_temp.blob_batch", (size, chunks, seq))

    def _staged(self, blobs: list[tuple[str, bytes]], sql: str, params: Any = None) -> None:
        """Runs ``sql`` on ``blobs`` put in a table of this connection's own
        (pg_temp.blob_batch, emptied at commit) by binary COPY: as a
        parameter, each byte would be two hex digits for the server to parse,
        four times the time. Its bytes are stored uncompressed (EXTERNAL):
        they are read once, to be compressed where they are kept; compressed
        here too, a megabyte of text took 90 ms to store, not 39."""
        payload = binary_copy([(digest.encode(), data) for digest, data in blobs])
        made: list[Any] = []

        def store(cur: Any) -> None:
            if cur.connection not in _STAGING:
                cur.execute(STAGING_TABLE)
                made.append(cur.connection)
            cur.copy_expert("COPY pg_temp.blob_batch FROM STDIN (FORMAT binary)",
                            io.BytesIO(payload))
            cur.execute(sql, params)

        self._db.transact(store)
        _STAGING.update(made)  # committed: the table stays while the connection does

    def blob_chunk(self, digest: str, seq: int) -> bytes | None:
        rows = self._db.call("SELECT shell.blob_chunk(%s, %s) AS data", (digest, seq))
        data = rows[0]["data"]
        return None if data is None else bytes(data)

    def blobs(self, digests: list[str]) -> dict[str, bytes]:
        """The bytes of these blobs (chunks joined) in one call; a blob not
        stored is left out. For small blobs: the caller bounds the bytes."""
        # Binary COPY: the bytes as they are, where a query's result would
        # spell each byte in two hex digits (on both sides, four times slower).
        def read(cur: Any) -> bytes:
            sink = io.BytesIO()
            cur.copy_expert(cur.mogrify(
                "COPY (SELECT sha256, data FROM shell.blob_chunks_of(%s::text[])) "
                "TO STDOUT (FORMAT binary)", (digests,)).decode(), sink)
            return sink.getvalue()

        found: dict[str, bytes] = {}
        for name, data in binary_rows(self._db.transact(read)):  # chunks in order
            digest = name.decode()
            found[digest] = found[digest] + data if digest in found else data
        return found

    def put_trees(self, trees: list[list[dict[str, Any]]]) -> list[str]:
        """Stores trees (children first); returns the hashes the database computed."""
        if not trees:
            return []
        rows = self._db.call("SELECT shell.put_trees(%s) AS hashes", (json_param(trees),))
        return list(rows[0]["hashes"])

    def listing(self, root: str) -> list[dict[str, Any]]:
        return self._db.call("SELECT * FROM shell.tree_listing(%s)", (root,))

    def diff(self, old_root: str, new_root: str) -> list[dict[str, Any]]:
        return self._db.call("SELECT * FROM shell.tree_diff(%s, %s)", (old_root, new_root))

    def complete_upload(self, command_id: int, worker_id: str, attempt: int) -> None:
        self._db.call("SELECT shell.complete_upload(%s, %s, %s)", (command_id, worker_id, attempt))


def binary_copy(rows: list[tuple[bytes, bytes]]) -> bytes:
    """COPY ... FROM STDIN (FORMAT binary) input of rows of two non-null fields."""
    out = io.BytesIO()
    out.write(COPY_HEADER.pack(COPY_SIGNATURE, 0, 0))
    for row in rows:
        out.write(FIELDS.pack(len(row)))
        for field in row:
            out.write(SIZE.pack(len(field)))
            out.write(field)
    out.write(FIELDS.pack(-1))
    return out.getvalue()


def binary_rows(data: bytes) -> Iterator[list[bytes]]:
    """The rows of COPY ... (FORMAT binary) output of non-null fields: each
    field's bytes (a text field's are its UTF-8). ValueError on anything else,
    cut short included."""
    view = memoryview(data)
    if not data.startswith(COPY_SIGNATURE):
        raise ValueError("not the output of COPY ... (FORMAT binary)")
    try:
        _signature, _flags, extension = COPY_HEADER.unpack_from(view)
        at = COPY_HEADER.size + extension
        while (fields := FIELDS.unpack_from(view, at)[0]) != -1:
            at += FIELDS.size
            row = []
            for _ in range(fields):
                size = SIZE.unpack_from(view, at)[0]
                at += SIZE.size
                if size < 0:
                    raise ValueError("a NULL field in COPY output read as non-null")
                if at + size > len(view):
                    raise ValueError("COPY output cut short")
                row.append(view[at:at + size].tobytes())
                at += size
            yield row
    except struct.error as exc:
        raise ValueError(f"COPY output cut short: {exc}") from exc
