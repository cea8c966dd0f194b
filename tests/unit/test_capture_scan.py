"""What a capture accepts from the scan (tenant data: a supervisor the tenant
subverted may send anything). A directory reported as unchanged must be
one the host's index knows, in the new root, and not also sent whole; the
entries of unchanged directories come from the index. Pure: the scan is
only validated here, nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest

from executor.sandbox.protocol import ScanReport
from executor.workspace.cache import Children, Dir, Index
from executor.workspace.capture import Capture, CaptureLimits

BLOB = "b" * 64
INDEX_CHILDREN: dict[str, Children] = {
    "": {"a": ["dir", 0o755, 0, 10, 1, None], "top": ["file", 0o644, 5, 11, 1, BLOB]},
    "a": {"b": ["dir", 0o755, 0, 20, 1, None], "f": ["file", 0o644, 7, 21, 1, BLOB]},
    "a/b": {"g": ["file", 0o644, 9, 30, 1, BLOB]},
}


def capture(max_entries: int = 100) -> Capture:
    dirs = {p: Dir.of("t" * 64, 0, c) for p, c in INDEX_CHILDREN.items()}
    index = Index("r" * 64, dirs, {p: dict(c) for p, c in INDEX_CHILDREN.items()})
    return Capture(None, index, CaptureLimits(max_entries, 1 << 20, 1 << 20))  # type: ignore[arg-type]


def entry(path: str, kind: str = "file", size: int = 1, inode: int = 99) -> list[Any]:
    return [path, kind, 0o644 if kind == "file" else 0o755, size if kind == "file" else 0, inode,
            2, None]


def test_unchanged_directories_come_from_the_index_and_only_changed_files_are_asked() -> None:
    c = capture()
    # The home sent whole: a unchanged entry, top rewritten (new ctime); a and a/b unchanged.
    wanted = c.wanted([[*entry("a", "dir", inode=10)[:5], 1, None],
                       ["top", "file", 0o644, 6, 11, 2, None], ["a"], ["a/b"]], ScanReport())
    assert (wanted, c.failure) == (["top"], None)
    assert c.known == {p: Dir.of("t" * 64, 0, ch).digest for p, ch in INDEX_CHILDREN.items()}


def test_a_deep_change_asks_only_for_the_file_that_changed() -> None:
    c = capture()
    wanted = c.wanted([[""], ["a"], ["a/b/g", "file", 0o644, 9, 30, 5, None], entry("a/b/new")],
                      ScanReport())
    assert (sorted(wanted), c.failure) == (["a/b/g", "a/b/new"], None)


@pytest.mark.parametrize("manifest, why", [
    ([["elsewhere"], [""]], "not a directory this host knows"),
    ([[""], [""], ["a"], ["a/b"]], "reported twice"),
    ([["../etc"]], "invalid path"),
    ([["/"]], "invalid path"),
    ([[""], ["a"], ["a/b"], entry("a/b/g")], "both unchanged and sent whole"),
    # The home now holds a file named a, but a (and a/b) are said unchanged.
    ([entry("a"), entry("top"), ["a"], ["a/b"]], "not a directory of the home"),
    # A file under a directory that is not in the new root.
    ([[""], ["a"], ["a/b"], entry("nowhere/x")], "not a directory of the home"),
    ([["a", "b"]], "malformed manifest entry"),
])
def test_a_scan_that_does_not_add_up_saves_nothing(manifest: list[list[Any]], why: str) -> None:
    c = capture()
    assert c.wanted(manifest, ScanReport()) == []
    assert c.failure is not None and why in c.failure


def test_entries_of_unchanged_directories_count_against_the_cap() -> None:
    c = capture(max_entries=4)  # the index's home holds 5 entries
    assert c.wanted([[""], ["a"], ["a/b"]], ScanReport()) == []
    assert c.failure is not None and "more than 4 entries" in c.failure


def test_a_file_sent_that_was_not_asked_for_fails_the_capture() -> None:
    c = capture()
    assert c.wanted([[""], ["a"], ["a/b"]], ScanReport()) == []
    c.begin("a/f")
    c.data(b"sneaky")
    c.end(True, None)
    assert c.failure is not None and "not asked for" in c.failure
