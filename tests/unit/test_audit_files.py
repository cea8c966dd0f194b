"""`audit verify --files` as pure logic: trees and blobs held in memory,
hashed as tree.py hashes them, altered the way an attacker with the database
would alter them."""

from __future__ import annotations

import hashlib
from typing import Any

from executor.audit.files import Files
from executor.workspace.tree import tree_hash


class Memory:
    """Trees and blobs as a database would hold them."""

    def __init__(self) -> None:
        self.stored_trees: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self.stored_blobs: dict[str, list[bytes]] = {}

    def tree(self, entries: list[dict[str, Any]]) -> str:
        h = tree_hash(entries)
        self.stored_trees[h] = (sum(e["size"] for e in entries), entries)
        return h

    def blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.stored_blobs[digest] = [data]
        return digest

    def trees(self, hashes: list[str]) -> dict[str, tuple[int, list[dict[str, Any]]]]:
        return {h: self.stored_trees[h] for h in hashes if h in self.stored_trees}

    def blobs(self, digests: list[str]) -> dict[str, tuple[int, int, list[int]]]:
        return {d: (sum(map(len, self.stored_blobs[d])), len(self.stored_blobs[d]),
                    list(range(len(self.stored_blobs[d]))))
                for d in digests if d in self.stored_blobs}

    def chunk(self, digest: str, seq: int) -> bytes | None:
        chunks = self.stored_blobs.get(digest, [])
        return chunks[seq] if seq < len(chunks) else None


def entry(name: str, kind: str, size: int, obj: str) -> dict[str, Any]:
    return {"name": name, "kind": kind, "mode": 0o755 if kind == "dir" else 0o644,
            "size": size, "object": obj, "target": None}


def test_a_path_thousands_of_directories_deep_is_checked_without_recursion():
    mem = Memory()
    digest = mem.blob(b"deep\n")
    h = mem.tree([entry("f", "file", 5, digest)])
    for _ in range(3000):
        h = mem.tree([entry("d", "dir", 5, h)])
    assert Files(mem).problems(h) == ()
    mem.stored_blobs[digest] = [b"DEEP\n"]
    (found,) = Files(mem).problems(h)
    assert (found.path, found.what, found.cause) == ("d/" * 3000 + "f", "blob", "edited")


def test_a_directory_that_names_a_directory_above_it_ends_the_walk():
    mem = Memory()
    inner = mem.tree([])
    root = mem.tree([entry("a", "dir", 0, inner)])
    # The attacker points the inner directory back at the root.
    mem.stored_trees[inner] = (0, [entry("loop", "dir", 0, root)])
    found = {(p.path, p.what, p.cause) for p in Files(mem).problems(root)}
    assert found == {("a", "tree", "edited"), ("a/loop", "tree", "edited")}
