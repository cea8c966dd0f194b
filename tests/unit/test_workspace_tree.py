"""Trees (pure): the hash, and the validation of what a scan reports (tenant
data)."""

from __future__ import annotations

import pytest

from executor.workspace.tree import (
    EMPTY_TREE,
    InvalidEntry,
    check_entry,
    check_path,
    tree_hash,
)

BLOB = "a" * 64


def test_the_hash_ignores_entry_order_and_sees_every_field() -> None:
    a = {"name": "a", "kind": "file", "mode": 420, "size": 1, "object": BLOB, "target": None}
    b = {"name": "b", "kind": "symlink", "mode": 511, "size": 0, "object": None, "target": "a"}
    assert tree_hash([a, b]) == tree_hash([b, a])
    for change in ({"mode": 493}, {"size": 2}, {"object": "b" * 64}, {"name": "c"}):
        assert tree_hash([{**a, **change}, b]) != tree_hash([a, b])
    assert tree_hash([]) == EMPTY_TREE


@pytest.mark.parametrize("path", ["", "/etc/passwd", "../x", "a/../b", "a//b", "a/", ".", "a/./b",
                                  "x\0y", "\udcff", "n" * 256, 1])
def test_paths_outside_or_not_normal_are_refused(path) -> None:
    with pytest.raises(InvalidEntry):
        check_path(path)


def test_odd_but_valid_names_pass() -> None:
    for path in ("with space", "new\nline", "ünï", "-rf", "a/b c/d"):
        assert check_path(path) == path


@pytest.mark.parametrize("kind, mode, size, target", [
    ("fifo", 0o644, 0, None), ("file", -1, 0, None), ("file", 0o10000, 0, None),
    ("file", 0o644, -1, None),
    ("file", 0o644, 11, None), ("symlink", 0o777, 0, None), ("symlink", 0o777, 0, ""),
    ("file", 0o644, 1, "x"),
])
def test_bad_entries_are_refused(kind, mode, size, target) -> None:
    with pytest.raises(InvalidEntry):
        check_entry("p", kind, mode, size, target, max_size=10)
