"""Trees: the format of a session's files in the database, pure logic.

A tree is one directory: a list of entries {name, kind, mode, size, object,
target}. Its hash is sha256 over "tree" NUL and, in byte order of the names,
"<kind> <mode> <size> <object>" NUL <name> NUL <target> NUL per entry —
exactly what SQL's shell.tree_hash computes, which the database checks on
every tree it stores. A directory's size is the sum of the sizes below it.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

KINDS = ("file", "dir", "symlink")
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096


class InvalidEntry(ValueError):
    """An entry a scan reported that cannot be part of a tree."""


@dataclass(frozen=True)
class Entry:
    """One path below the home, as it will be stored."""

    kind: str
    mode: int
    size: int
    object: str | None = None  # blob sha256 (file) or tree hash (dir, filled in by build)
    target: str | None = None  # symlink target


def tree_hash(entries: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256(b"tree\0")
    for e in sorted(entries, key=lambda e: str(e["name"]).encode()):
        head = f"{e['kind']} {e['mode']} {e['size']} {e.get('object') or ''}"
        digest.update(head.encode() + b"\0" + str(e["name"]).encode() + b"\0"
                      + (e.get("target") or "").encode() + b"\0")
    return digest.hexdigest()


EMPTY_TREE = tree_hash([])


def check_path(path: object) -> str:
    """A relative, normalized path of valid names, or InvalidEntry."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path:
        raise InvalidEntry(f"invalid path {str(path)[:200]!r}")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEntry(f"path {path[:200]!r} is not UTF-8") from exc
    if len(encoded) > MAX_PATH_BYTES or posixpath.normpath(path) != path:
        raise InvalidEntry(f"invalid path {path[:200]!r}")
    for part in path.split("/"):
        if part in ("", ".", "..") or len(part.encode()) > MAX_NAME_BYTES:
            raise InvalidEntry(f"invalid path {path[:200]!r}")
    return path


def check_entry(path: str, kind: object, mode: object, size: object, target: object,
                max_size: int) -> None:
    if kind not in KINDS:
        raise InvalidEntry(f"{path!r}: unknown kind {kind!r}")
    if not isinstance(mode, int) or not 0 <= mode <= 0o7777:
        raise InvalidEntry(f"{path!r}: invalid mode {mode!r}")
    if not isinstance(size, int) or not 0 <= size <= max_size:
        raise InvalidEntry(f"{path!r}: size {size!r} is outside 0..{max_size}")
    if kind == "symlink":
        if (not isinstance(target, str) or not target or "\0" in target
                or len(target.encode()) > MAX_PATH_BYTES):
            raise InvalidEntry(f"{path!r}: invalid link target")
    elif target is not None:
        raise InvalidEntry(f"{path!r}: only a symbolic link has a target")


@dataclass(frozen=True)
class BuiltTree:
    root: str
    size: int
    trees: list[tuple[str, list[dict[str, Any]]]]  # (hash, entries) of every tree, children first
    dirs: dict[str, str]  # directory path ("" for the root) -> tree hash


def build(entries: dict[str, Entry]) -> BuiltTree:
    """The trees of a flat map of paths (every parent present as a dir)."""
    children: dict[str, list[str]] = defaultdict(list)
    for path in entries:
        parent = posixpath.dirname(path)
        if parent and entries.get(parent, Entry("", 0, 0)).kind != "dir":
            raise InvalidEntry(f"{path!r}: its parent is not a directory")
        children[parent].append(path)
    trees: list[tuple[str, list[dict[str, Any]]]] = []
    dirs: dict[str, str] = {}
    sizes: dict[str, int] = {}
    # Deepest directories first, so every subtree's hash is known before its parent's.
    order = sorted((p for p, e in entries.items() if e.kind == "dir"), key=lambda p: -p.count("/"))
    for directory in [*order, ""]:
        rows: list[dict[str, Any]] = []
        for path in children.get(directory, []):
            e = entries[path]
            size = sizes[path] if e.kind == "dir" else e.size
            rows.append({"name": posixpath.basename(path), "kind": e.kind, "mode": e.mode,
                         "size": size, "object": dirs[path] if e.kind == "dir" else e.object,
                         "target": e.target})
        dirs[directory] = tree_hash(rows)
        sizes[directory] = sum(r["size"] for r in rows)
        trees.append((dirs[directory], rows))
    return BuiltTree(dirs[""], sizes[""], trees, dirs)
