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


class Record:
    """What a capture asks of this host's change record (changes.py)."""

    def __init__(self, token: str | None, changed: list[str] | None) -> None:
        self._token, self._changed = token, changed

    def token(self, _session_id: str) -> str | None:
        return self._token

    def take(self, _session_id: str, token: str | None) -> list[str] | None:
        return self._changed if token is not None and token == self._token else None

    def mountpoint(self, _session_id: str) -> str | None:
        return None  # the scan alone: no file is read here


def capture(max_entries: int = 100, record: Record | None = None,
            watch: str | None = None) -> Capture:
    dirs = {p: Dir.of("t" * 64, 0, c) for p, c in INDEX_CHILDREN.items()}
    index = Index("r" * 64, dirs, {p: dict(c) for p, c in INDEX_CHILDREN.items()}, watch=watch)
    return Capture(None, index, CaptureLimits(max_entries, 1 << 20, 1 << 20),  # type: ignore[arg-type]
                   record, "s")  # type: ignore[arg-type]


def entry(path: str, kind: str = "file", size: int = 1, inode: int = 99) -> list[Any]:
    return [path, kind, 0o644 if kind == "file" else 0o755, size if kind == "file" else 0, inode,
            2, None]


def test_unchanged_directories_come_from_the_index_and_only_changed_files_are_asked() -> None:
    c = capture()
    assert c.scan() == {"known": c.known}  # no change record: the whole home is walked
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


def test_with_a_change_record_only_the_directories_it_names_are_scanned() -> None:
    c = capture(record=Record("w1", ["a"]), watch="w1")
    digest = Dir.of("t" * 64, 0, INDEX_CHILDREN["a"]).digest
    assert c.scan() == {"known": {"a": digest}, "changed": ["a"], "held": {"a/b": [20, 1]}}
    # a listed: b as the index holds it (so a/b is not scanned), f rewritten.
    wanted = c.wanted([["a/b", "dir", 0o755, 0, 20, 1, None], entry("a/f", inode=21)],
                      ScanReport())
    assert (wanted, c.failure) == (["a/f"], None)


def test_a_subdirectory_listed_since_its_parent_was_is_looked_at_with_it() -> None:
    """Its entry in the parent has no ctime (the capture that listed it
    alone cleared it): it is listed, not held, and what it holds is held."""
    c = capture(record=Record("w1", [""]), watch="w1")
    c._index.loaded[""] = {**INDEX_CHILDREN[""], "a": ["dir", 0o755, 0, 10, None, None]}
    scan = c.scan()
    assert (scan["changed"], scan["held"]) == (["", "a"], {"a/b": [20, 1]})
    assert set(scan["known"]) == {"", "a"}

def test_a_directory_put_in_the_place_of_another_and_not_listed_is_empty() -> None:
    c = capture(record=Record("w1", ["a"]), watch="w1")
    c.scan()
    # a/b is another directory now (another inode), and the scan sent nothing of it.
    assert c.wanted([["a/b", "dir", 0o755, 0, 77, 3, None], ["a/f", "file", 0o644, 7, 21, 1,
                                                                None]], ScanReport()) == []
    assert c.failure is None
    assert c._children("a/b") == {}


def test_a_record_not_complete_since_the_index_walks_the_whole_home() -> None:
    for record, watch in ((Record("w2", ["a"]), "w1"), (Record("w1", None), "w1"),
                          (Record(None, ["a"]), None)):
        c = capture(record=record, watch=watch)
        assert "changed" not in c.scan() and c.known == {
            p: Dir.of("t" * 64, 0, ch).digest for p, ch in INDEX_CHILDREN.items()}


def test_a_targeted_scan_that_listed_nothing_keeps_the_index_s_root_and_reads_no_directory(
) -> None:
    c = capture(record=Record("w1", []), watch="w1")
    c._index.loaded.clear()

    def no_reads(directories: list[str]) -> dict[str, Children]:
        raise AssertionError(f"read {directories}")

    c._index.load_children = no_reads
    assert c.scan() == {"known": {}, "changed": [], "held": {}}
    assert (c.wanted([], ScanReport()), c.failure) == ([], None)
    captured = c.commit_trees()
    assert captured is not None and captured.root == "r" * 64
    assert captured.index.dirs == c._index.dirs and captured.index.watch == "w1"
    # The index was made here, not read from a file: it is written whole.
    assert (captured.changed, captured.removed) == (None, set())


def test_a_home_left_as_it_was_still_counts_against_lowered_bounds() -> None:
    c = capture(max_entries=4, record=Record("w1", []), watch="w1")  # the home holds 5 entries
    c.scan()
    assert c.wanted([], ScanReport()) == [] and c.commit_trees() is None
    assert c.failure is not None and "more than 4 entries" in c.failure
