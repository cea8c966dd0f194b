"""What an executor host knows about its copy of a session's files.

The copy is a Docker volume the tenant's commands write to; the index is a
SQLite file beside the volumes, on the host, out of the tenant's reach. It
records the root the copy holds and, per directory, its tree in that root
and its entries with the inode and ctime each had when the root was
committed (a file's with the blob it matched). Rules (DESIGN.md §9):

- the copy is used only when the index's root is the session's current root;
- the index is distrusted (its root cleared) before a command starts (a copy
  whose command did not commit is never trusted again), and trusted again
  only when the command's new root is committed;
- an entry is taken as unchanged only if its kind, mode, size, inode and
  ctime are all as recorded. A tenant cannot set a ctime, and a rename
  changes the inode found at a path, so a stale entry is never reused.

One row per directory, so a command writes the rows of the directories it
changed and of those above them, never the whole index, and reads the
entries only of those (``listing_digest`` says which changed); what it
reads of every directory is a summary (its tree, size and digest).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sqlite3
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.sandbox.volumes import index_path, remove_index

log = logging.getLogger(__name__)

# name -> [kind, mode, size, inode, ctime_ns, blob (file) or target (symlink) or None]
Children = dict[str, list[Any]]
SCHEMA = """
CREATE TABLE copy (root TEXT, watch TEXT);
CREATE TABLE dirs (
    path TEXT PRIMARY KEY,   -- '' is the home
    tree TEXT NOT NULL,      -- its tree hash in the root
    size INTEGER NOT NULL,   -- bytes below it
    digest TEXT NOT NULL,    -- listing_digest of its entries
    file_bytes INTEGER NOT NULL,  -- bytes of the files directly in it
    entries INTEGER NOT NULL,     -- entries directly in it
    children TEXT NOT NULL        -- JSON Children
) WITHOUT ROWID;
"""


def listing_digest(children: Children) -> str:
    """What the supervisor's scan computes for a directory it finds
    (sandbox-image/supervisor.py: listing_digest) from the same entries."""
    digest = hashlib.sha256()
    for name in sorted(children, key=str.encode):
        kind, mode, size, inode, ctime, value = children[name]
        target = value if kind == "symlink" else ""
        digest.update(f"{name}\0{kind}\0{mode}\0{size}\0{inode}\0{ctime}\0{target}\0".encode())
    return digest.hexdigest()[:32]


def file_bytes(children: Children) -> int:
    """Bytes of the files directly in a directory."""
    return sum(c[2] for c in children.values() if c[0] == "file")


@dataclass(frozen=True)
class Dir:
    """One directory of the copy, as its parent and the scan need it."""

    tree: str
    size: int
    digest: str
    file_bytes: int
    entries: int

    @staticmethod
    def of(tree: str, size: int, children: Children) -> Dir:
        return Dir(tree, size, listing_digest(children), file_bytes(children), len(children))


@dataclass
class Index:
    root: str | None  # None: the copy's contents are unknown (imported on capture)
    dirs: dict[str, Dir] = field(default_factory=dict)  # directory path ('' the home) -> Dir
    # Entries of the directories read so far; the rest come from ``load_children``.
    loaded: dict[str, Children] = field(default_factory=dict)
    load_children: Callable[[list[str]], dict[str, Children]] | None = None
    # Whether it was read from the host's file (whose rows a commit then
    # only updates), not made here (a restore's, a new copy's).
    stored: bool = False
    # The change record that was running when its scan was taken (changes.py).
    watch: str | None = None

    def read(self, paths: Iterable[str]) -> None:
        """Reads the entries of these directories, in one go."""
        missing = [p for p in paths if p not in self.loaded and p in self.dirs]
        if missing and self.load_children:
            self.loaded.update(self.load_children(missing))

    def children(self, path: str) -> Children:
        self.read([path])
        return self.loaded.get(path, {})

    def trees(self) -> set[str]:
        """Tree hashes of the root, all stored."""
        return {d.tree for d in self.dirs.values()}


class IndexUnreadable(Exception):
    """The host's index went away (or broke) while a command used it: what
    the capture needs of it is gone, so the command's files are not saved."""


class HostCache:
    def __init__(self, directory: str) -> None:
        self._dir = Path(directory)

    def path(self, session_id: str) -> Path:
        return index_path(self._dir, session_id)

    def load(self, session_id: str) -> Index | None:
        """The index of a trusted copy; None if there is none (or it is unreadable)."""
        path = self.path(session_id)
        if not path.exists():
            with contextlib.suppress(OSError):  # an older executor's index
                path.with_suffix(".json").unlink()
            return None
        try:
            with closing(_open(path)) as db:
                _add_watch(db)  # an index made before change records
                row = db.execute("SELECT root, watch FROM copy").fetchone()
                if row is None or row[0] is None:
                    return None
                dirs = {p: Dir(t, s, d, b, n) for p, t, s, d, b, n in db.execute(
                    "SELECT path, tree, size, digest, file_bytes, entries FROM dirs")}
        except sqlite3.Error:
            return None
        return Index(row[0], dirs, {}, lambda directories: _children(path, directories),
                     stored=True, watch=row[1])

    def forget(self, session_id: str) -> None:
        """The copy is about to change: distrust it until a commit says otherwise."""
        path = self.path(session_id)
        if not path.exists():
            return
        try:
            with closing(_open(path)) as db, db:
                db.execute("UPDATE copy SET root = NULL")
        except sqlite3.Error:
            self.remove(session_id)

    def save(self, session_id: str, index: Index, changed: Iterable[str] | None = None,
             removed: Iterable[str] = ()) -> None:
        """Commits ``index``: the rows of ``changed`` directories are written
        and those of ``removed`` deleted, in one transaction with the root,
        so the file never holds half of it; ``changed=None`` writes a new
        file whole. If that fails the index is removed: the copy is then
        rebuilt from the database, never trusted on a partial index."""
        path = self.path(session_id)
        try:
            if changed is None:
                self.remove(session_id)
                self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            with closing(_open(path, create=changed is None)) as db, db:
                db.executemany("DELETE FROM dirs WHERE path = ?", ((p,) for p in removed))
                db.executemany(
                    "INSERT OR REPLACE INTO dirs VALUES (?, ?, ?, ?, ?, ?, ?)",
                    ((p, d.tree, d.size, d.digest, d.file_bytes, d.entries,
                      json.dumps(index.children(p), separators=(",", ":")))
                     for p in (index.dirs if changed is None else changed)
                     for d in (index.dirs[p],)))
                db.execute("DELETE FROM copy")
                db.execute("INSERT INTO copy VALUES (?, ?)", (index.root, index.watch))
        except (sqlite3.Error, OSError, IndexUnreadable) as exc:
            log.warning("session_id=%s: this host's index of its copy could not be written "
                        "(%s); the next command restores the copy", session_id, exc)
            self.remove(session_id)

    def remove(self, session_id: str) -> None:
        remove_index(self._dir, session_id)


def _open(path: Path, create: bool = False) -> sqlite3.Connection:
    """The index's database; never made anew unless ``create``, so a reader
    or an update of an index removed meanwhile fails instead of finding it
    empty."""
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode={'rwc' if create else 'rw'}", uri=True)
    # Every commit reaches the disk: after a power cut the root ``forget``
    # cleared is still cleared, so a copy is never trusted by mistake.
    db.execute("PRAGMA synchronous=FULL")
    if create:
        # Left open: the caller's rows join it, so a new index is one
        # transaction (one set of syncs, 2 ms here, not three, 5 ms).
        db.executescript("BEGIN;" + SCHEMA)
    return db


def _add_watch(db: sqlite3.Connection) -> None:
    columns = {row[1] for row in db.execute("PRAGMA table_info(copy)")}
    if "watch" not in columns:
        with db:
            db.execute("ALTER TABLE copy ADD COLUMN watch TEXT")


def _children(path: Path, directories: list[str]) -> dict[str, Children]:
    found: dict[str, Children] = {}
    try:
        with closing(_open(path)) as db:
            for at in range(0, len(directories), 500):
                part = directories[at:at + 500]
                marks = ",".join("?" * len(part))
                found.update((p, json.loads(c)) for p, c in db.execute(
                    f"SELECT path, children FROM dirs WHERE path IN ({marks})", part))
    except sqlite3.Error as exc:
        raise IndexUnreadable(str(exc)) from exc
    missing = set(directories) - set(found)
    if missing:
        raise IndexUnreadable(f"no entries for directory {min(missing)[:200]!r}")
    return found
