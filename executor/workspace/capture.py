"""After a command: store what it changed, and build the session's new root.

Once the command ended, the supervisor asks what to scan (``scan``): the
directories this host's change record names (changes.py), or, without a
record complete since the index, the whole home. It reports each directory
it lists either as unchanged (its entries still hash to the digest the
host's index gave it) or whole, each entry with its inode and ctime; after
a targeted scan, a directory it did not list is as the index holds it.
Only files whose inode, ctime or size differ from the index are read and
sent, so the bytes moved and hashed are those the command changed. The trees of directories left
unchanged, with nothing changed below them, are taken from the index: the
executor validates, compares and hashes only the directories that changed
and those above them; of the others it handles a summary each.

Each file sent is hashed as it arrives and spooled (memory up to
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

from executor import metrics
from executor.db.workspace import WorkspaceStore
from executor.sandbox.protocol import ScanReport

from .cache import Children, Dir, Index, IndexUnreadable, file_bytes
from .changes import ChangeRecords
from .host_reads import chunks, open_as_scanned
from .tree import InvalidEntry, check_entry, check_path, tree_hash

log = logging.getLogger(__name__)
CHUNK_BYTES = 4 * 1024 * 1024
BATCH_BYTES = 4 * 1024 * 1024  # small blobs held before one shell.put_blobs call
BATCH_BLOBS = 1000
# The digests sent with a command, by their paths' bytes: even escaped in JSON
# (six bytes a byte at worst) far within the supervisor's limit on a frame.
KNOWN_BYTES = 4 * 1024 * 1024


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
    changed: list[str] | None  # directories whose index rows change (None: all)
    removed: set[str]  # directories no longer there


class Capture:
    """One command's files (a FileReceiver for Sandbox.run)."""

    def __init__(self, store: WorkspaceStore, index: Index, limits: CaptureLimits,
                 records: ChangeRecords | None = None, session_id: str = "") -> None:
        self._store = store
        self._index = index
        self._limits = limits
        self._records = records
        self._session_id = session_id
        self._max_bytes = limits.quota_bytes
        self.max_entries: int | None = limits.max_entries
        self.known: dict[str, str] = {}
        # Whether the scan listed only the directories that changed: then
        # a directory it did not list is as the index holds it.
        self._targeted = False
        self._asked: set[str] = set()  # the directories a targeted scan looked at
        self._watch: str | None = None
        # Where the copy is mounted on this host, when changed files may be
        # read there (host_reads.py).
        self._mountpoint: str | None = None
        self.expected_bytes = 0
        self._listed: dict[str, Children] = {}  # directories the scan sent whole
        self._same: set[str] = set()  # directories the scan found as the index has them
        self._dirs: dict[str, list[str]] = {}  # the new root's directories -> subdirectories
        self._unchanged_root = False  # nothing listed: the new root is the index's
        self._received: dict[str, str] = {}  # path -> blob sha256
        self._current: _Incoming | None = None
        self._received_bytes = 0
        self._batch: list[tuple[str, bytes]] = []  # small blobs not stored yet
        self._batch_bytes = 0
        self.failure: str | None = None

    # -- the runner's questions -------------------------------------------------

    def scan(self) -> dict[str, Any]:
        """What the supervisor walks: the directories this host's change
        record names (and the index's subdirectories of them), or, without
        a record that is complete since the index, the whole home."""
        changed = None
        if self._records is not None:
            changed = self._records.take(self._session_id, self._index.watch)
            self._watch = self._records.token(self._session_id)
            self._mountpoint = self._records.mountpoint(self._session_id)
        try:
            if changed is not None and self._index.root is not None:
                scan = self._targeted_scan([check_path(d) if d else d for d in changed])
                metrics.CAPTURE_SCANS.labels(walk="changed").inc()
                return scan
        except (InvalidEntry, IndexUnreadable) as exc:
            log.warning("session_id=%s: the whole home is walked: %s", self._session_id, exc)
        self.known = _known(self._index)
        metrics.CAPTURE_SCANS.labels(walk="home").inc()
        return {"known": self.known}

    def _targeted_scan(self, changed: list[str]) -> dict[str, Any]:
        """The changed directories are listed; so is a subdirectory of one
        whose entry there is older than its own listing (_mark_relisted),
        as its inode and ctime there cannot tell it from another."""
        listed, held = set(changed), {}
        todo = changed
        while todo:
            self._index.read(todo)
            relisted = []
            for d in todo:
                if d not in self._index.dirs:
                    continue
                for name, e in self._index.children(d).items():
                    path = _join(d, name)
                    if e[0] != "dir" or path in listed:
                        continue
                    if e[4] is None:
                        relisted.append(path)
                    else:
                        held[path] = [e[3], e[4]]
            listed.update(relisted)
            todo = relisted
        self.known = {d: self._index.dirs[d].digest for d in listed if d in self._index.dirs}
        self._targeted, self._asked = True, listed
        return {"known": self.known, "changed": sorted(listed), "held": held}

    def wanted(self, manifest: list[list[Any]], scan: ScanReport) -> list[str]:
        self.failure = self._scan_failure(scan)
        if self.failure:
            return []
        try:
            return self._wanted(manifest)
        except InvalidEntry as exc:
            self.failure = str(exc)
        except IndexUnreadable as exc:
            self.failure = f"this host's index of the files is gone ({exc}); run it again"
        return []

    def _wanted(self, manifest: list[list[Any]]) -> list[str]:
        if self._targeted and not manifest:
            return self._unchanged()
        self._listed, self._same = self._validated(manifest)
        metrics.CAPTURE_LISTED.inc(len(self._listed))
        self._index.read(self._listed)
        self._dirs = self._walk()
        entries = sum(self._index.dirs[d].entries if d in self._same else len(self._children(d))
                      for d in self._dirs)
        total = sum(self._index.dirs[d].file_bytes if d in self._same
                    else file_bytes(self._children(d)) for d in self._dirs)
        if not self._fits(entries, total):
            return []
        changed = [(_join(d, name), e[2]) for d, children in self._listed.items()
                   for name, e in children.items()
                   if e[0] == "file" and self._old_blob(d, name, e) is None]
        paths = [path for path, _size in changed]
        self.expected_bytes = sum(size for _path, size in changed)
        if self.expected_bytes > self._limits.max_bytes:
            self.failure = (f"the command changed {self.expected_bytes} bytes of files, more than "
                            f"the {self._limits.max_bytes} one command may change; change fewer "
                            "at a time")
            return []
        rest = self._read_on_host(self._mountpoint, paths) if self._mountpoint else paths
        if self.failure:
            return []
        metrics.CAPTURE_FILES.labels(via="host").inc(len(paths) - len(rest))
        metrics.CAPTURE_FILES.labels(via="sandbox").inc(len(rest))
        return rest

    def _unchanged(self) -> list[str]:
        """A targeted scan that listed nothing: the new root is the index's,
        so no directory is walked or hashed (at 500 directories, about 1 ms a
        command); its bounds, which may have been lowered, are still checked
        on the index's summaries."""
        self._unchanged_root = True
        dirs = self._index.dirs.values()
        self._fits(sum(d.entries for d in dirs), sum(d.file_bytes for d in dirs))
        return []

    def _fits(self, entries: int, total: int) -> bool:
        """Whether the new root's entries and file bytes are within the
        capture's bounds and the quota; if not, ``failure`` says which."""
        if entries > self._limits.max_entries:
            self.failure = self._scan_failure(ScanReport(over=True))
        elif total > self._max_bytes:
            self.failure = f"the files hold {total} bytes, more than the quota of {self._max_bytes}"
        return self.failure is None

    def _read_on_host(self, mountpoint: str, paths: list[str]) -> list[str]:
        """Reads the files it can where the host mounts the copy
        (host_reads.py); returns the others, for the supervisor to send."""
        rest = []
        for path in paths:
            entry = self._entry(path)
            fd = open_as_scanned(mountpoint, path, entry) if entry else None
            if fd is None:
                rest.append(path)
                continue
            self.begin(path)
            try:
                for chunk in chunks(fd):
                    self.data(chunk)
            except OSError as exc:
                self.end(False, exc.strerror)
            else:
                self.end(True, None)
            if self.failure:
                return []
        return rest

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
            entry = self._entry(incoming.path)
            if entry is None or entry[0] != "file":
                self.failure = f"{incoming.path!r} was sent but not asked for"
                return
            digest = incoming.sha256.hexdigest()
            self._store_blob(digest, incoming)
            self._received[incoming.path] = digest
            entry[2] = incoming.size  # what was read is what is stored
        finally:
            incoming.spool.close()

    # -- the result ---------------------------------------------------------------

    def commit_trees(self) -> Captured | None:
        """Stores the new root's trees; None (with ``failure``) if the files
        cannot be saved."""
        if self.failure:
            return None
        self._flush()
        try:
            return self._commit_trees()
        except IndexUnreadable as exc:
            self.failure = f"this host's index of the files is gone ({exc}); run it again"
            return None

    def _commit_trees(self) -> Captured | None:
        old = self._index
        if self._unchanged_root and old.root is not None:  # a targeted scan had one
            index = Index(old.root, old.dirs, old.loaded, old.load_children, old.stored,
                          self._watch)
            return Captured(old.root, old.dirs[""].size, index, [] if old.stored else None,
                            set())
        for d, children in self._listed.items():
            for name, e in children.items():
                if e[0] == "file":
                    e[5] = self._received.get(_join(d, name)) or self._old_blob(d, name, e)
                    if e[5] is None:
                        self.failure = f"a changed file did not arrive: {_join(d, name)!r}"
                        return None
        dirs, changed, trees = self._trees()
        stored = self._store.put_trees([rows for _h, rows in trees])
        if stored != [h for h, _rows in trees]:
            raise RuntimeError("the database hashed a tree differently from the executor")
        loaded = {d: c for d, c in self._index.loaded.items() if d in dirs}
        loaded.update((d, self._children(d)) for d in changed)
        rewritten = list(dict.fromkeys(changed + self._mark_relisted(dirs, loaded)))
        index = Index(dirs[""].tree, dirs, loaded, self._index.load_children, self._index.stored,
                      self._watch)
        removed = set(self._index.dirs) - set(dirs)
        return Captured(dirs[""].tree, dirs[""].size, index,
                        rewritten if self._index.stored else None, removed)

    def _mark_relisted(self, dirs: dict[str, Dir], loaded: dict[str, Children]) -> list[str]:
        """A directory a targeted scan listed without looking at its parent:
        the parent's entry for it keeps the ctime it had (a name made or
        removed in it changed that), so the next scan of the parent would
        take it for another directory put in its place and walk all below
        it. Its ctime there becomes None: list it with its parent next time.
        Returns the parents whose entries changed so."""
        marked = []
        for d in self._listed if self._targeted else ():
            parent, _, name = d.rpartition("/")
            if not d or parent in self._asked or parent in self._listed or parent not in dirs:
                continue
            children = loaded.get(parent) or self._index.children(parent)
            entry = children.get(name)
            if entry is not None and entry[0] == "dir" and entry[4] is not None:
                loaded[parent] = {**children, name: [*entry[:4], None, *entry[5:]]}
                marked.append(parent)
        return marked

    # -- helpers --------------------------------------------------------------------

    def _validated(self, manifest: list[list[Any]]) -> tuple[dict[str, Children], set[str]]:
        """The scan's directories: those sent whole, by their entries, and
        those found unchanged."""
        listed: dict[str, Children] = {}
        same: set[str] = set()
        for item in manifest:
            if isinstance(item, list) and len(item) == 1:
                path = item[0]
                if path != "":
                    check_path(path)
                if path in same:
                    raise InvalidEntry(f"{path[:200]!r}: reported twice")
                if path not in self._index.dirs:
                    raise InvalidEntry(f"{path[:200]!r}: not a directory this host knows")
                same.add(path)
                continue
            if not isinstance(item, list) or len(item) != 7:
                raise InvalidEntry("malformed manifest entry")
            path, kind, mode, size, inode, ctime, target = item
            check_entry(check_path(path), kind, mode, size, target, self._max_bytes)
            parent, _, name = path.rpartition("/")
            children = listed.setdefault(parent, {})
            if not isinstance(inode, int) or not isinstance(ctime, int) or name in children:
                raise InvalidEntry(f"{path!r}: malformed manifest entry")
            children[name] = [kind, mode, size if kind == "file" else 0, inode, ctime, target]
        return listed, same

    def _walk(self) -> dict[str, list[str]]:
        """Every directory of the new root, from the home down, with its
        subdirectories: an unchanged one's as the index has them. After a
        targeted scan, a directory not listed is unchanged unless its
        parent was listed with it as another directory (inode or ctime
        not the index's): then it is one the scan walked and found empty."""
        below: dict[str, list[str]] = {}
        for path in self._index.dirs:
            if path:
                below.setdefault(path.rpartition("/")[0], []).append(path)
        dirs: dict[str, list[str]] = {}
        todo: list[tuple[str, bool]] = [("", False)]
        while todo:
            d, replaced = todo.pop()
            if d in self._same and d in self._listed:
                raise InvalidEntry(f"{d!r}: both unchanged and sent whole")
            if d in self._listed:
                listed = self._listed[d]
                old = self._index.children(d) if d in self._index.dirs else {}
                subs = [(_join(d, name), not _same_dir(old.get(name), e))
                        for name, e in listed.items() if e[0] == "dir"]
                dirs[d] = [s for s, _replaced in subs]
                todo.extend(subs)
            elif d in self._same or (self._targeted and not replaced and d in self._index.dirs):
                self._same.add(d)
                dirs[d] = below.get(d, [])
                todo.extend((s, False) for s in dirs[d])
            else:
                dirs[d] = []  # a directory the scan found empty
        stray = (set(self._listed) | self._same) - set(dirs)
        if stray:
            raise InvalidEntry(f"{min(stray)[:200]!r}: reported, but not a directory of the home")
        return dirs

    def _trees(self) -> tuple[dict[str, Dir], list[str], list[tuple[str, list[dict[str, Any]]]]]:
        """Every directory's tree, deepest first: an unchanged one with
        nothing changed below keeps the index's. Returns the new Dirs, the
        directories whose rows change, and the trees not stored yet."""
        old, known = self._index.dirs, self._index.trees()
        dirs: dict[str, Dir] = {}
        changed: list[str] = []
        new_trees: list[tuple[str, list[dict[str, Any]]]] = []
        order = sorted(self._dirs, key=lambda p: -p.count("/") if p else 1)
        for d in order:
            subs = self._dirs[d]
            if d in self._same and all(dirs[s].tree == old[s].tree for s in subs):
                dirs[d] = old[d]
                continue
            children = self._children(d)
            rows = [{"name": name, "kind": e[0], "mode": e[1],
                     "size": dirs[_join(d, name)].size if e[0] == "dir" else e[2],
                     "object": (dirs[_join(d, name)].tree if e[0] == "dir"
                                else e[5] if e[0] == "file" else None),
                     "target": e[5] if e[0] == "symlink" else None}
                    for name, e in children.items()]
            tree = tree_hash(rows)
            dirs[d] = Dir.of(tree, sum(r["size"] for r in rows), children)
            changed.append(d)
            if tree not in known:
                known.add(tree)
                new_trees.append((tree, rows))
        return dirs, changed, new_trees

    def _children(self, d: str) -> Children:
        """A directory's entries in the new root (none: a directory the
        scan found empty)."""
        return self._index.children(d) if d in self._same else self._listed.get(d, {})

    def _entry(self, path: str) -> list[Any] | None:
        parent, _, name = path.rpartition("/")
        return self._listed.get(parent, {}).get(name)

    def _old_blob(self, d: str, name: str, entry: list[Any]) -> str | None:
        """The blob of an unchanged file, from the index."""
        old = self._index.children(d).get(name) if d in self._index.dirs else None
        if (old is not None and old[0] == "file" and old[2] == entry[2] and old[3] == entry[3]
                and old[4] == entry[4] and isinstance(old[5], str)):
            return old[5]
        return None

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


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def _same_dir(old: list[Any] | None, new: list[Any]) -> bool:
    """Whether an entry is the directory the index holds there (its inode
    and ctime: a directory put in another's place has another)."""
    return old is not None and old[0] == "dir" and old[3] == new[3] and old[4] == new[4]


def _known(index: Index) -> dict[str, str]:
    """What the scan may report as unchanged: the index's digests, as many
    as KNOWN_BYTES of paths allow (a directory left out is sent whole, so
    a home of many long paths costs only time, never the request's size)."""
    known: dict[str, str] = {}
    budget = KNOWN_BYTES
    for path, d in index.dirs.items():
        budget -= len(path.encode()) + len(d.digest)
        if budget < 0:
            break
        known[path] = d.digest
    return known
