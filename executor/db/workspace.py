"""The workspace's side of the executor contract: blobs and trees in,
listings, differences and blob chunks out (their functions: sql/schema.sql)."""

from __future__ import annotations

from typing import Any

from executor.db.connection import json_param
from executor.db.queue import ExecutorDatabase


class WorkspaceStore:
    """Workspace calls over one executor connection (retried like every call)."""

    def __init__(self, db: ExecutorDatabase) -> None:
        self._db = db

    def put_blobs(self, blobs: list[tuple[str, bytes]]) -> None:
        """Stores small blobs (each at most one chunk) in one call: (sha256, bytes)."""
        self._db.call("SELECT shell.put_blobs(%s::text[], %s::bytea[])",
                      ([digest for digest, _data in blobs], [data for _digest, data in blobs]))

    def put_blob_chunk(self, digest: str, size: int, chunks: int, seq: int, data: bytes) -> None:
        self._db.call("SELECT shell.put_blob_chunk(%s, %s, %s, %s, %s)",
                      (digest, size, chunks, seq, data))

    def blob_chunk(self, digest: str, seq: int) -> bytes | None:
        rows = self._db.call("SELECT shell.blob_chunk(%s, %s) AS data", (digest, seq))
        data = rows[0]["data"]
        return None if data is None else bytes(data)

    def blobs(self, digests: list[str]) -> dict[str, bytes]:
        """The bytes of these blobs (chunks joined) in one call; a blob not
        stored is left out. For small blobs: the caller bounds the bytes."""
        rows = self._db.call("SELECT sha256, data FROM shell.blob_chunks_of(%s::text[])",
                             (digests,))
        found: dict[str, bytes] = {}
        for row in rows:  # chunks in order; a small blob is one
            digest, data = row["sha256"], bytes(row["data"])
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
