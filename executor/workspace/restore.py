"""Before a command: make this host's copy of the session hold its root.

A copy whose index names the session's root is used as it is. A copy that
holds an older committed root gets only the difference (the database
compares the two trees without entering equal subtrees, and only the blobs
that differ are read); any other copy is wiped and rebuilt. Either way the
writing happens inside a locked-down container (Sandbox.restore), fed a tar
stream built here from blobs read from the database, never by extracting
tenant data on the host.

Small blobs (one chunk each) are read many at a time, in the order the
stream needs them; a larger one a chunk at a time.

Each blob is checked against its SHA-256 and size as it is read: its last
chunk is sent only once they match, so a blob altered in the database ends
the stream short of it and the restore fails with the reason. The
supervisor is sent the SHA-256s too (the header's "sha256", one for each
file of the archive, in its order): it writes the bytes under a name of its
own and puts them in place only when they match, so a file is never left
holding altered bytes.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import queue
import tarfile
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from executor.db.workspace import WorkspaceStore
from executor.errors import PgShellError

from .cache import Children, Dir, HostCache, Index
from .capture import CHUNK_BYTES
from .tree import EMPTY_TREE

BLOCK = 512
TAR_TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE}
# Small blobs read in one call: at most this many bytes, and blobs.
BATCH_BYTES = 8 * 1024 * 1024
BATCH_BLOBS = 1000
# Reads of the database (each a batch of small blobs or a chunk, at most
# BATCH_BYTES or CHUNK_BYTES) done ahead of the archive.
PREFETCH = 2

# (header, tar stream) -> the restore container's conversation
Restorer = Callable[[dict[str, Any], Iterable[bytes]], Any]


class RestoreFailed(PgShellError):
    """The host's copy could not be brought to the session's root."""


def prepare(store: WorkspaceStore, cache: HostCache, session_id: str, root: str | None,
            restorer: Restorer, index: Index | None) -> Index:
    """The index of a copy that holds ``root`` (restored if needed), given
    ``index``, the one ``cache`` holds now. A session without a root (from
    before the workspace) keeps what its volume holds: its next capture
    imports all of it."""
    if root is None:
        return Index(None)
    if index is not None and index.root == root:
        return index
    listing = store.listing(root)
    if index is not None and index.root == EMPTY_TREE:
        # A new copy: everything is written, nothing deleted (the diff
        # against nothing would only be the listing again).
        writes = listing
        header: dict[str, Any] = {"wipe": False, "delete": []}
    elif index is not None and index.root is not None:
        changes = store.diff(index.root, root)
        # Everything deleted or replaced goes first; a directory whose mode
        # alone changed stays (its entry in the tar sets the mode).
        delete = [c["path"] for c in changes
                  if c["change"] == "deleted"
                  or (c["change"] == "modified" and not c["kind"] == c["old_kind"] == "dir")]
        writes = [c for c in changes if c["change"] != "deleted"]
        header = {"wipe": False, "delete": delete}
    else:
        writes = listing
        header = {"wipe": True, "delete": []}
    # Each file's blob, in the archive's order, for the supervisor to check.
    header["sha256"] = [e["object"] for e in writes if e["kind"] == "file"]
    cache.forget(session_id)  # half-restored is untrusted too
    stream = TarStream(store, writes)
    try:
        conversation = restorer(header, stream)
    finally:
        stream.close()  # its reads of the database are over before anything else reads it
    if stream.failure:  # the stream ended short of it; the container's error says less
        raise RestoreFailed(f"restoring session {session_id}: {stream.failure}")
    if not conversation.restored or not conversation.manifest_done:
        raise RestoreFailed(f"restoring session {session_id}: "
                            f"{conversation.restore_error or 'no answer'}")
    return _index_of(root, listing, conversation.manifest)


class TarStream:
    """A tar archive of ``entries`` (rows of a listing or a diff), each file's
    bytes streamed chunk by chunk from the database. A blob that does not
    hash to its SHA-256 (or holds another size) ends the archive before its
    last chunk, and ``failure`` says why: the restore must fail."""

    def __init__(self, store: WorkspaceStore, entries: list[dict[str, Any]]) -> None:
        self._store = store
        self._entries = entries
        self._batch: dict[str, bytes] = {}  # small blobs read ahead
        self.failure: str | None = None
        # The blobs are read ahead, in another thread, from now on: the
        # database's time overlaps the restore container's start, then the
        # container's writing.
        self._ahead = _Ahead(self._pieces(), PREFETCH)

    def __iter__(self) -> Iterator[bytes]:
        pieces = self._ahead
        try:
            for e in self._entries:
                info = tarfile.TarInfo(e["path"])
                info.type = TAR_TYPES[e["kind"]]
                info.mode = e["mode"]
                info.size = e["size"] if e["kind"] == "file" else 0
                info.linkname = e["target"] or ""
                yield info.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict")
                if e["kind"] != "file":
                    continue
                chunks = iter(pieces.__next__, None)
                yield from self._checked(e["path"], e["object"], info.size, chunks)
                if self.failure:
                    return
                if info.size % BLOCK:
                    yield b"\0" * (BLOCK - info.size % BLOCK)
            yield b"\0" * (2 * BLOCK)
        finally:
            pieces.close()

    def close(self) -> None:
        """Stops reading ahead, and waits for a read under way to end."""
        self._ahead.close()

    def _pieces(self) -> Iterator[list[bytes | None]]:
        """Each file's bytes, chunk by chunk, and None after each file, in
        lists: one for each read of the database (a batch of small blobs, or
        one chunk of a large one), so the thread that reads ahead hands over
        a few lists rather than two items a file."""
        ready: list[bytes | None] = []
        for at, e in enumerate(self._entries):
            if e["kind"] != "file":
                continue
            if e["size"] <= CHUNK_BYTES:
                if e["object"] not in self._batch:
                    if ready:
                        yield ready
                        ready = []
                    self._batch = self._store.blobs(self._batch_from(at))
                data = self._batch.get(e["object"])
                ready.extend((None,) if data is None else (data, None))
                continue
            if ready:
                yield ready
                ready = []
            for chunk in self._chunks(e["object"]):
                yield [chunk]
            ready.append(None)
        if ready:
            yield ready

    def _batch_from(self, at: int) -> list[str]:
        """The small blobs to read at once from entry ``at`` on."""
        wanted: dict[str, None] = {}
        size = 0
        for e in itertools.islice(self._entries, at, None):
            if e["kind"] != "file" or e["size"] > CHUNK_BYTES or e["object"] in wanted:
                continue
            if wanted and (size + e["size"] > BATCH_BYTES or len(wanted) == BATCH_BLOBS):
                break
            wanted[e["object"]] = None
            size += e["size"]
        return list(wanted)

    def _chunks(self, digest: str) -> Iterator[bytes]:
        for seq in itertools.count():
            chunk = self._store.blob_chunk(digest, seq)
            if chunk is None:
                return
            yield chunk

    def _checked(self, path: str, digest: str, size: int,
                 chunks: Iterable[bytes]) -> Iterator[bytes]:
        """The blob's chunks, each sent once the next is read: the last one
        only after the whole blob was checked."""
        hasher = hashlib.sha256()
        held: bytes | None = None
        read = 0
        for chunk in chunks:
            hasher.update(chunk)
            read += len(chunk)
            if held is not None:
                yield held
            held = chunk
        if read != size:
            self.failure = f"{path!r}: blob {digest} holds {read} bytes, its entry says {size}"
        elif hasher.hexdigest() != digest:
            self.failure = (f"{path!r}: the stored bytes of blob {digest} hash to "
                            f"{hasher.hexdigest()} (altered in the database)")
        elif held is not None:
            yield held


class _Ahead:
    """The items of an iterator of lists, read ``depth`` lists ahead in a
    thread of its own; its error is raised where the items are taken."""

    def __init__(self, source: Iterator[list[bytes | None]], depth: int) -> None:
        self._items: queue.Queue[tuple[str, Any]] = queue.Queue(depth)
        self._taken: collections.deque[bytes | None] = collections.deque()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(source,), name="restore-read",
                                        daemon=True)
        self._thread.start()

    def _run(self, source: Iterator[list[bytes | None]]) -> None:
        try:
            for items in source:
                if not self._put(("items", items)):
                    return
            self._put(("end", None))
        except BaseException as exc:  # raised again in the reader's thread
            self._put(("error", exc))

    def _put(self, entry: tuple[str, Any]) -> bool:
        while not self._closed.is_set():
            try:
                self._items.put(entry, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def __next__(self) -> bytes | None:
        while not self._taken:
            try:
                kind, value = self._items.get(timeout=0.2)
            except queue.Empty:
                if self._closed.is_set():  # the restore is over: nobody reads on
                    raise StopIteration from None
                continue
            if kind == "error":
                raise value
            if kind == "end":
                raise StopIteration
            self._taken.extend(value)
        return self._taken.popleft()

    def close(self) -> None:
        self._closed.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


def _index_of(root: str, listing: list[dict[str, Any]], manifest: list[list[Any]]) -> Index:
    """The index of a freshly restored copy: the listing's objects, with the
    inodes and ctimes the restore container found."""
    found = {item[0]: item for item in manifest if isinstance(item, list) and len(item) == 7}
    children: dict[str, Children] = {"": {}}
    trees: dict[str, tuple[str, int]] = {"": (root, 0)}
    for row in listing:
        item = found.pop(row["path"], None)
        if item is None or item[1] != row["kind"]:
            raise RestoreFailed(f"after the restore, {row['path']!r} is not what the root holds")
        value = row["object"] if row["kind"] == "file" else row["target"]
        parent, _, name = row["path"].rpartition("/")
        children.setdefault(parent, {})[name] = [
            row["kind"], row["mode"], row["size"] if row["kind"] == "file" else 0,
            item[4], item[5], value]
        if row["kind"] == "dir":
            children.setdefault(row["path"], {})
            trees[row["path"]] = (row["object"], row["size"])
        if not parent:
            trees[""] = (root, trees[""][1] + row["size"])
    if found:
        raise RestoreFailed(f"after the restore, {next(iter(found))!r} "
                            "is there but not in the root")
    dirs = {path: Dir.of(*trees[path], children[path]) for path in children}
    return Index(root, dirs, children)
