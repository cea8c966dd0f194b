"""After a command: store what it changed, and build the session's new root.

The supervisor reports every entry of the home with its inode and ctime (a
metadata walk); only files whose inode, ctime or size differ from the host's
index are read and sent, so the bytes moved and hashed are those the
command changed. Each one is hashed as it arrives and spooled (memory up to
one chunk, then a temporary file): the executor stores bytes it received
itself, never a claim. Everything in the report is tenant data and is
validated here.

Bounds (CaptureLimits): a capture holds at most ``max_entries`` entries and
reads at most ``max_bytes`` of changed files; past either, the command's
files are not saved and it fails with the reason. Small files are stored
in batches (one database call per batch, shell.put_blobs), larger ones
chunk by chunk.

Every changed file's bytes are sent to the database, whether or not some
blob already holds them: asking first (and skipping the upload when the
answer is yes) would let a tenant time its commands to learn whether any
other tenant stores a given content. The database still keeps one copy.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from dataclasses import dataclass
from typing import Any

from executor.db.workspace import WorkspaceStore
from executor.sandbox.protocol import ScanReport

from .cache import Index
from .tree import Entry, InvalidEntry, build, check_entry, check_path

log = logging.getLogger(__name__)
CHUNK_BYTES = 4 * 1024 * 1024
BATCH_BYTES = 4 * 1024 * 1024  # small blobs held before one shell.put_blobs call
BATCH_BLOBS = 1000


@dataclass(frozen=True)
class CaptureLimits:
    max_entries: int  # entries (files, directories, links) the home may hold after a command
    max_bytes: int  # bytes of changed files one command's capture reads
    quota_bytes: int  # bytes all the home's files may hold (the session's quota)


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

    def __init__(self, store: WorkspaceStore, index: Index, limits: CaptureLimits) -> None:
        self._store = store
        self._index = index
        self._limits = limits
        self._max_bytes = limits.quota_bytes
        self.max_entries: int | None = limits.max_entries
        self.expected_bytes = 0
        # path -> [kind, mode, size, inode, ctime_ns, target]
        self._entries: dict[str, list[Any]] = {}
        self._received: dict[str, str] = {}  # path -> blob sha256
        self._current: _Incoming | None = None
        self._received_bytes = 0
        self._batch: list[tuple[str, bytes]] = []  # small blobs not stored yet
        self._batch_bytes = 0
        self.failure: str | None = None

    # -- the runner's questions -------------------------------------------------

    def wanted(self, manifest: list[list[Any]], scan: ScanReport) -> list[str]:
        self.failure = self._scan_failure(scan)
        if self.failure:
            return []
        try:
            self._entries = self._validated(manifest)
        except InvalidEntry as exc:
            self.failure = str(exc)
            return []
        total = sum(e[2] for e in self._entries.values() if e[0] == "file")
        if total > self._max_bytes:
            self.failure = f"the files hold {total} bytes, more than the quota of {self._max_bytes}"
            return []
        paths = [path for path, e in self._entries.items()
                 if e[0] == "file" and not self._unchanged(path, e)]
        self.expected_bytes = sum(self._entries[p][2] for p in paths)
        if self.expected_bytes > self._limits.max_bytes:
            self.failure = (f"the command changed {self.expected_bytes} bytes of files, more than "
                            f"the {self._limits.max_bytes} one command may change; change fewer "
                            "at a time")
            return []
        return paths

    def begin(self, path: str) -> None:
        self._discard()
        self._current = _Incoming(path)

    def data(self, chunk: bytes) -> None:
        incoming = self._current
        if incoming is None or self.failure:
            return
        self._received_bytes += len(chunk)
        if self._received_bytes > min(self._max_bytes, self._limits.max_bytes):
            # More than the manifest said (files that grew after the scan cannot: no
            # tenant process is left), so more than the scan's cap allowed.
            self.failure = (f"the files sent exceed {min(self._max_bytes, self._limits.max_bytes)} "
                            "bytes")
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
            self._store_blob(digest, incoming)
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
        self._flush()
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

    def _scan_failure(self, scan: ScanReport) -> str | None:
        if scan.failed is not None:
            path, why = (str(part)[:300] for part in scan.failed)
            return (f"{path!r}: {why}; what is below it cannot be saved, so none of this "
                    "command's changes were (make its paths shorter, or remove it)")
        if scan.over:
            return (f"the home holds more than {self._limits.max_entries} entries (files, "
                    "directories and links), the most a session's files may hold; remove some "
                    "(e.g. build output or caches) and run the command again")
        return None

    def _store_blob(self, digest: str, incoming: _Incoming) -> None:
        """A file of one chunk joins the batch; a larger one is stored chunk by chunk."""
        incoming.spool.seek(0)
        if incoming.size <= CHUNK_BYTES:
            self._batch.append((digest, incoming.spool.read()))
            self._batch_bytes += incoming.size
            if self._batch_bytes >= BATCH_BYTES or len(self._batch) >= BATCH_BLOBS:
                self._flush()
            return
        chunks = -(-incoming.size // CHUNK_BYTES)
        for seq in range(chunks):
            self._store.put_blob_chunk(digest, incoming.size, chunks, seq,
                                       incoming.spool.read(CHUNK_BYTES))

    def _flush(self) -> None:
        if self._batch:
            self._store.put_blobs(self._batch)
        self._batch, self._batch_bytes = [], 0

    def _discard(self) -> None:
        if self._current is not None:
            self._current.spool.close()
            self._current = None
