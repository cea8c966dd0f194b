"""Trees (pure): the hash, building from a flat map, and the validation of
what a scan reports (tenant data)."""

from __future__ import annotations

import pytest

from executor.workspace.tree import (
    EMPTY_TREE,
    Entry,
    InvalidEntry,
    build,
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


def test_build_gives_unchanged_subtrees_the_same_hash_and_sums_sizes() -> None:
    base = {"d": Entry("dir", 0o755, 0), "d/f": Entry("file", 0o644, 5, BLOB),
            "e": Entry("dir", 0o755, 0), "e/g": Entry("file", 0o644, 7, BLOB)}
    one = build(base)
    two = build({**base, "e/g": Entry("file", 0o644, 8, "b" * 64)})
    assert one.dirs["d"] == two.dirs["d"] and one.dirs["e"] != two.dirs["e"]
    assert (one.size, two.size) == (12, 13)
    assert [h for h, _rows in one.trees][-1] == one.root  # the root comes last
    assert build({}).root == EMPTY_TREE


def test_an_entry_under_a_non_directory_is_refused() -> None:
    with pytest.raises(InvalidEntry):
        build({"f": Entry("file", 0o644, 1, BLOB), "f/x": Entry("file", 0o644, 1, BLOB)})
    with pytest.raises(InvalidEntry):
        build({"missing/x": Entry("file", 0o644, 1, BLOB)})


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
