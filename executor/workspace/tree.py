"""Trees: the format of a session's files in the database, pure logic.

A tree is one directory: a list of entries {name, kind, mode, size, object,
target}. Its hash is sha256 over "tree" NUL and, in byte order of the names,
"<kind> <mode> <size> <object>" NUL <name> NUL <target> NUL per entry —
exactly what SQL's shell.tree_hash computes, which the database checks on
every tree it stores. A directory's size is the sum of the sizes below it
(executor/workspace/capture.py builds the trees).
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any

KINDS = ("file", "dir", "symlink")
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096


class InvalidEntry(ValueError):
    """An entry a scan reported that cannot be part of a tree."""


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
