"""After a command: store what it changed, and build the session's new root.

The supervisor reports every entry of the home with its inode and ctime (a
metadata walk); only files whose inode, ctime or size differ from the host's
index are read and sent, so the bytes moved and hashed are those the
command changed. Each one is hashed as it arrives, spooled (memory up to one
chunk, then a temporary file) and stored as a blob only if the database
lacks it: the executor stores bytes it received itself, never a claim.
Everything in the report is tenant data and is validated here.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from dataclasses import dataclass
from typing import Any

from executor.db.workspace import WorkspaceStore

from .cache import Index
from .tree import Entry, InvalidEntry, build, check_entry, check_path

log = logging.getLogger(__name__)
CHUNK_BYTES = 4 * 1024 * 1024


class _Incoming:
    def __init__(self, path: str) -> None:
        self.path = path
        self.size = 0
        self.sha256 = hashlib.sha256()
        self.spool = tempfile.SpooledTemporaryFile(max_size=CHUNK_BYTES)


@dataclass(frozen=True)
class Captured:
    root: str
    size: int
    index: Index


class Capture:
    """One command's files (a FileReceiver for Sandbox.run)."""

    def __init__(self, store: WorkspaceStore, index: Index, max_bytes: int) -> None:
        self._store = store
        self._index = index
        self._max_bytes = max_bytes
        # path -> [kind, mode, size, inode, ctime_ns, target]
        self._entries: dict[str, list[Any]] = {}
        self._received: dict[str, str] = {}  # path -> blob sha256
        self._current: _Incoming | None = None
        self._received_bytes = 0
        self.failure: str | None = None

    # -- the runner's questions -------------------------------------------------

    def wanted(self, manifest: list[list[Any]]) -> list[str]:
        try:
            self._entries = self._validated(manifest)
        except InvalidEntry as exc:
            self.failure = str(exc)
            return []
        total = sum(e[2] for e in self._entries.values() if e[0] == "file")
        if total > self._max_bytes:
            self.failure = f"the files hold {total} bytes, more than the quota of {self._max_bytes}"
            return []
        return [path for path, e in self._entries.items()
                if e[0] == "file" and not self._unchanged(path, e)]

    def begin(self, path: str) -> None:
        self._discard()
        self._current = _Incoming(path)

    def data(self, chunk: bytes) -> None:
        incoming = self._current
        if incoming is None or self.failure:
            return
        self._received_bytes += len(chunk)
        if self._received_bytes > self._max_bytes:
            self.failure = f"the files sent exceed the quota of {self._max_bytes} bytes"
            self._discard()
            return
        incoming.size += len(chunk)
        incoming.sha256.update(chunk)
        incoming.spool.write(chunk)

    def end(self, ok: bool, error: str | None) -> None:
        incoming, self._current = self._current, None
        if incoming is None or self.failure:
            return
        try:
            if not ok:
                self.failure = f"{incoming.path!r} could not be read: {error}"
                return
            digest = incoming.sha256.hexdigest()
            if self._store.missing_blobs([digest]):
                self._upload(digest, incoming)
            self._received[incoming.path] = digest
            self._entries[incoming.path][2] = incoming.size  # what was read is what is stored
        finally:
            incoming.spool.close()

    # -- the result ---------------------------------------------------------------

    def commit_trees(self) -> Captured | None:
        """Stores the new root's trees; None (with ``failure``) if the files
        cannot be saved."""
        if self.failure:
            return None
        missing = [p for p, e in self._entries.items()
                   if e[0] == "file" and p not in self._received and not self._unchanged(p, e)]
        if missing:
            self.failure = f"{len(missing)} changed files did not arrive (first: {missing[0]!r})"
            return None
        entries: dict[str, Entry] = {}
        index_entries: dict[str, list[Any]] = {}
        for path, (kind, mode, size, inode, ctime, target) in self._entries.items():
            obj = self._received.get(path) or (self._index.entries[path][5] if kind == "file"
                                               else None)
            entries[path] = Entry(kind, mode, size, obj, target)
            index_entries[path] = [kind, mode, size, inode, ctime,
                                   obj if kind == "file" else target]
        try:
            built = build(entries)
        except InvalidEntry as exc:
            self.failure = str(exc)
            return None
        new = [(h, rows) for h, rows in built.trees if h not in self._index.trees]
        stored = self._store.put_trees([rows for _h, rows in new])
        if stored != [h for h, _rows in new]:
            raise RuntimeError("the database hashed a tree differently from the executor")
        trees = {h for h, _rows in built.trees}
        return Captured(built.root, built.size, Index(built.root, index_entries, trees))

    # -- helpers --------------------------------------------------------------------

    def _validated(self, manifest: list[list[Any]]) -> dict[str, list[Any]]:
        entries: dict[str, list[Any]] = {}
        for item in manifest:
            if not isinstance(item, list) or len(item) != 7:
                raise InvalidEntry("malformed manifest entry")
            path, kind, mode, size, inode, ctime, target = item
            check_entry(check_path(path), kind, mode, size, target, self._max_bytes)
            if not isinstance(inode, int) or not isinstance(ctime, int) or path in entries:
                raise InvalidEntry(f"{path!r}: malformed manifest entry")
            entries[path] = [kind, mode, size if kind == "file" else 0, inode, ctime, target]
        return entries

    def _unchanged(self, path: str, entry: list[Any]) -> bool:
        old = self._index.entries.get(path)
        return (old is not None and old[0] == "file" and old[2] == entry[2] and old[3] == entry[3]
                and old[4] == entry[4] and isinstance(old[5], str))

    def _upload(self, digest: str, incoming: _Incoming) -> None:
        chunks = -(-incoming.size // CHUNK_BYTES)
        incoming.spool.seek(0)
        for seq in range(chunks):
            self._store.put_blob_chunk(digest, incoming.size, chunks, seq,
                                       incoming.spool.read(CHUNK_BYTES))
        if chunks == 0:  # the empty file: a blob of no chunks
            self._store.put_blob_chunk(digest, 0, 0, 0, b"")

    def _discard(self) -> None:
        if self._current is not None:
            self._current.spool.close()
            self._current = None
