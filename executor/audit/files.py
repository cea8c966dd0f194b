"""`pg-shell audit verify --files`: the files below every recorded root, recomputed.

A result record vouches for roots (root_before, root_after); a root is a
hash, and what it stands for are the trees and blobs below it. Here they are
read as stored and their hashes recomputed in executor/workspace/tree.py's
format (the same bytes as SQL's shell.tree_hash), so a tree entry or a
blob's bytes altered in the database is found although every record and
link still checks out. An upload's resulting root is recomputed as well: the
root before it with the uploaded file put in, as shell.tree_put_path does.

Roots share most of their trees, so each tree and blob is checked once per
run, and a broken one is reported once per session: at the first link
whose roots reach it, with its path below that root.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from executor.audit.verify import DELETED, EDITED, Break
from executor.workspace.tree import EMPTY_TREE, tree_hash

BATCH = 500  # trees or blobs asked for in one call
DIR_MODE = 0o755  # a directory an upload creates (shell.tree_put_path)

Tree = tuple[int, list[dict[str, Any]]]  # (recorded size, entries)
BlobRow = tuple[int, int, list[int]]  # (recorded size, recorded chunks, chunk numbers present)


class Stored(Protocol):
    """The database's trees and blobs, read as they are (executor/db/audit.py)."""

    def trees(self, hashes: list[str]) -> dict[str, Tree]: ...
    def blobs(self, digests: list[str]) -> dict[str, BlobRow]: ...
    def chunk(self, digest: str, seq: int) -> bytes | None: ...


@dataclass(frozen=True)
class Problem:
    """A tree or blob that is not what its hash says, at ``path`` below the
    tree it was found from ("" for that tree itself)."""

    path: str
    what: str  # "tree" or "blob"
    object: str
    cause: str  # EDITED or DELETED
    detail: str


class Files:
    """Checks the files below roots, remembering what it checked."""

    def __init__(self, stored: Stored) -> None:
        self._stored = stored
        self._trees: dict[str, Tree | None] = {}  # None: not stored
        self._blobs: dict[str, Problem | None] = {}  # each blob's problem (path ""), or None
        self._below: dict[str, tuple[Problem, ...]] = {}  # a tree hash -> the problems below it
        self._sizes: dict[str, int] = {}  # bytes each blob read holds

    def counted(self) -> dict[str, int]:
        return {"trees": len(self._trees), "blobs": len(self._blobs)}

    def check(self, session_id: str, links: list[Mapping[str, Any]]) -> list[Break]:
        """The breaks below the roots of a session's links, in chain order."""
        breaks: list[Break] = []
        reported: set[tuple[str, str, str]] = set()
        ordered = sorted(links, key=lambda lk: (lk["chain_seq"] is None, lk["chain_seq"] or 0))
        for link in ordered:
            entry = "upload" if link.get("upload") is not None else "command"
            for name in ("root_before", "root_after"):
                root = link.get(name)
                if not root:
                    continue
                for p in self.problems(root):
                    if (p.what, p.object, p.path) in reported:
                        continue
                    reported.add((p.what, p.object, p.path))
                    where = f"{p.path!r}" if p.path else "the home"
                    breaks.append(Break(
                        session_id, link["command_id"], link["chain_seq"], p.cause,
                        f"{p.what} {p.object[:16]} at {where} ({name} of this {entry}): "
                        f"{p.detail}", p.what, p.path or "."))
            wrong = self._upload_root(link)
            if wrong:
                breaks.append(Break(session_id, link["command_id"], link["chain_seq"], EDITED,
                                    wrong, "root_after", link["upload"].get("path")))
        return breaks

    # -- trees --------------------------------------------------------------------

    def problems(self, root: str) -> tuple[Problem, ...]:
        """What is wrong below ``root``; computed children first, without
        recursion (a path may be 2,048 directories deep)."""
        self._load(root)
        stack: list[tuple[str, bool]] = [(root, False)]
        open_: set[str] = set()
        while stack:
            h, expanded = stack.pop()
            if h in self._below:
                continue
            stored = self._trees.get(h)
            if stored is None:
                self._below[h] = (Problem("", "tree", h, DELETED, "it is not stored"),)
                continue
            if not expanded:
                open_.add(h)
                stack.append((h, True))
                stack += [(e["object"], False) for e in stored[1]
                          if e["kind"] == "dir" and e["object"] not in self._below
                          and e["object"] not in open_]
                continue
            self._below[h] = self._tree_problems(h, stored, open_)
            open_.discard(h)
            self._trees[h] = (stored[0], [])  # checked: its entries are not needed again
        return self._below[root]

    def _tree_problems(self, h: str, stored: Tree, open_: set[str]) -> tuple[Problem, ...]:
        size, entries = stored
        found: list[Problem] = []
        computed = tree_hash(entries)
        total = sum(int(e["size"]) for e in entries)
        if computed != h:
            found.append(Problem("", "tree", h, EDITED, f"its entries hash to {computed[:16]}"))
        elif size != total:
            found.append(Problem("", "tree", h, EDITED,
                                 f"its recorded size {size} is not its entries' {total}"))
        for e in sorted(entries, key=lambda e: str(e["name"]).encode()):
            name, obj = str(e["name"]), e.get("object")
            if e["kind"] == "dir" and obj in open_:
                found.append(Problem(name, "tree", obj, EDITED, "it names a directory above it"))
            elif e["kind"] == "dir":
                found += [replace(p, path=posixpath.join(name, p.path).rstrip("/"))
                          for p in self._below[str(obj)]]
            elif e["kind"] == "file":
                blob = self._blobs.get(obj) if obj else None
                held = self._sizes.get(obj) if obj else None
                if blob is not None:
                    found.append(replace(blob, path=name))
                elif held is not None and held != int(e["size"]):
                    found.append(Problem(name, "blob", obj or "", EDITED,
                                         f"it holds {held} bytes, its entry says {e['size']}"))
        return tuple(found)

    def _load(self, root: str) -> None:
        """Reads every tree below ``root`` not read yet (a level at a time), then
        checks the blobs they hold that were not checked yet."""
        frontier = [root] if root not in self._trees else []
        digests: list[str] = []
        while frontier:
            found: dict[str, Tree] = {}
            for i in range(0, len(frontier), BATCH):
                found.update(self._stored.trees(frontier[i:i + BATCH]))
            following: dict[str, None] = {}
            for h in frontier:
                self._trees[h] = found.get(h)
                for e in found[h][1] if h in found else []:
                    obj = e.get("object")
                    if e["kind"] == "dir" and obj and obj not in self._trees:
                        following[obj] = None
                    elif e["kind"] == "file" and obj and obj not in self._blobs:
                        digests.append(obj)
                        self._blobs[obj] = None  # claimed; checked below
            frontier = list(following)
        for i in range(0, len(digests), BATCH):
            rows = self._stored.blobs(digests[i:i + BATCH])
            for digest in digests[i:i + BATCH]:
                self._blobs[digest] = self._blob_problem(digest, rows.get(digest))

    # -- blobs ----------------------------------------------------------------------

    def _blob_problem(self, digest: str, row: BlobRow | None) -> Problem | None:
        """Reads a blob chunk by chunk (never whole in memory) and recomputes
        its sha256 and size."""
        if row is None:
            return Problem("", "blob", digest, DELETED, "it is not stored")
        size, chunks, seqs = row
        hasher = hashlib.sha256()
        read = 0
        for seq in seqs:
            data = self._stored.chunk(digest, seq)
            if data is None:  # removed while being read
                return Problem("", "blob", digest, DELETED, f"its chunk {seq} is not stored")
            hasher.update(data)
            read += len(data)
        self._sizes[digest] = read
        if hasher.hexdigest() != digest:
            return Problem("", "blob", digest, EDITED,
                           f"its bytes hash to {hasher.hexdigest()[:16]}")
        if seqs != list(range(chunks)) or read != size:
            return Problem("", "blob", digest, EDITED,
                           f"its row says {size} bytes in {chunks} chunks, it holds {read} bytes "
                           f"in chunks {seqs[:8]}")
        return None

    # -- uploads --------------------------------------------------------------------

    def _upload_root(self, link: Mapping[str, Any]) -> str | None:
        """Why an upload's root_after is not its root before with the file put
        in, or None (also when a tree on the way is broken: reported above)."""
        upload = link.get("upload")
        if not isinstance(upload, dict) or link.get("status") != "done":
            return None
        path = upload.get("path")
        if not isinstance(path, str) or not path:
            return None
        expected = self._put_file(link.get("root_before") or EMPTY_TREE, path.split("/"), upload)
        if expected is None or expected == link.get("root_after"):
            return None
        return (f"the upload of {path[:200]!r} left root {str(link.get('root_after'))[:16]}, but "
                f"the root before it with that file put in is {expected[:16]}")

    def _put_file(self, root: str, parts: list[str], upload: Mapping[str, Any]) -> str | None:
        """The root shell.tree_put_path makes of ``root`` with the upload at
        ``parts``, or None where it would have refused or a tree is missing."""
        levels: list[list[dict[str, Any]]] = []
        modes: list[int] = []
        h = root
        for i, name in enumerate(parts):
            # Read again: a checked tree's entries are let go.
            stored = self._stored.trees([h]).get(h)
            if stored is None and h != EMPTY_TREE:
                return None
            entries = stored[1] if stored else []
            levels.append(entries)
            here = next((e for e in entries if e["name"] == name), None)
            if here is not None and (here["kind"] == "dir") == (i == len(parts) - 1):
                return None  # a directory at the file's place, or a file on its way
            if i < len(parts) - 1:
                modes.append(int(here["mode"]) if here else DIR_MODE)
                h = here["object"] if here else EMPTY_TREE
        child: dict[str, Any] = {"name": parts[-1], "kind": "file", "mode": upload.get("mode"),
                                 "size": upload.get("size"), "object": upload.get("sha256"),
                                 "target": None}
        for i in reversed(range(len(parts))):
            entries = [e for e in levels[i] if e["name"] != parts[i]] + [child]
            h = tree_hash(entries)
            if i:
                child = {"name": parts[i - 1], "kind": "dir", "mode": modes[i - 1],
                         "size": sum(int(e["size"]) for e in entries), "object": h, "target": None}
        return h
