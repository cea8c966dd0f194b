"""Reading the chained history for `pg-shell audit`, acting as shell_admin,
and the signing keys the history's signers register."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from executor.db.connection import transaction
from executor.db.database import Connector, Database


@contextlib.contextmanager
def snapshot(db: Database) -> Iterator[None]:
    """Every read until the end in one snapshot of the database: a command
    that ends while the history is read (its link, the session's head, the
    trees of its root) is seen whole or not at all, never as a break."""
    # db's calls run on this same connection, so inside this transaction.
    with transaction(db.connection()) as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def keys(db: Connector) -> list[dict[str, Any]]:
    return db.call("SELECT key_id, public_key, worker_id, registered_at::text FROM "
                   "shell.audit_keys()")


def sessions(db: Connector, session_id: str | None = None) -> list[dict[str, Any]]:
    return db.call("SELECT * FROM shell.audit_sessions(%s::uuid)", (session_id,))


def links(db: Connector, session_id: str) -> list[dict[str, Any]]:
    return db.call("SELECT * FROM shell.audit_history(%s::uuid)", (session_id,))


def history(db: Connector, session_id: str | None = None
            ) -> Iterator[tuple[dict[str, Any], list[Mapping[str, Any]]]]:
    """Each session with a chain and its links, one session in memory at a time."""
    for session in sessions(db, session_id):
        session["session_id"] = str(session["session_id"])
        given = inputs(db, session["session_id"])
        rows: list[Mapping[str, Any]] = [
            {**row, "session_id": str(row["session_id"]), "user_id": str(row["user_id"]),
             **({"input": given[row["command_id"]]} if row["command_id"] in given else {})}
            for row in links(db, session["session_id"])]
        yield session, rows


def inputs(db: Connector, session_id: str) -> dict[int, list[dict[str, Any]]]:
    """The input rows of the session's commands, by command."""
    found: dict[int, list[dict[str, Any]]] = {}
    for row in db.call("SELECT * FROM shell.audit_input(%s::uuid)", (session_id,)):
        found.setdefault(int(row.pop("command_id")), []).append(row)
    return found


def register_key(db: Connector, public_key_hex: str, owner: str) -> str:
    """Records the public key a signer (an executor, cleanup) signs with; its key id."""
    return str(db.call("SELECT shell.register_signing_key(%s, %s) AS key_id",
                       (public_key_hex, owner))[0]["key_id"])


class StoredFiles:
    """Trees and blobs as the database holds them, for `audit verify --files`
    (executor/audit/files.py recomputes their hashes)."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def trees(self, hashes: list[str]) -> dict[str, tuple[int, list[dict[str, Any]]]]:
        rows = self._db.call("SELECT * FROM shell.audit_trees(%s::text[])", (hashes,))
        return {r["hash"]: (int(r["size"]), list(r["entries"])) for r in rows}

    def blobs(self, digests: list[str]) -> dict[str, tuple[int, int, list[int]]]:
        rows = self._db.call("SELECT * FROM shell.audit_blobs(%s::text[])", (digests,))
        return {r["sha256"]: (int(r["size"]), int(r["chunks"]), list(r["seqs"])) for r in rows}

    def chunk(self, digest: str, seq: int) -> bytes | None:
        rows = self._db.call("SELECT shell.blob_chunk(%s, %s) AS data", (digest, seq))
        data = rows[0]["data"] if rows else None
        return None if data is None else bytes(data)
