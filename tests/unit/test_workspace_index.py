"""The host's index of a session's copy (executor/workspace/cache.py), on
real SQLite files: what a command needs of it is read lazily, so an index
that goes away meanwhile must fail the capture, never read as empty; and an
index that cannot be written is removed, never left partial."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from executor.sandbox.protocol import ScanReport
from executor.workspace import capture as capture_module
from executor.workspace.cache import Children, Dir, HostCache, Index, IndexUnreadable
from executor.workspace.capture import Capture, CaptureLimits

BLOB = "b" * 64
CHILDREN: dict[str, Children] = {
    "": {"a": ["dir", 0o755, 0, 10, 1, None]},
    "a": {"b": ["dir", 0o755, 0, 20, 1, None], "f": ["file", 0o644, 7, 21, 1, BLOB]},
    "a/b": {"g": ["file", 0o644, 9, 30, 1, BLOB]},
}


def saved(tmp_path: Path) -> HostCache:
    cache = HostCache(str(tmp_path))
    dirs = {p: Dir.of(f"{p or 'root'}".ljust(64, "t"), 0, c) for p, c in CHILDREN.items()}
    cache.save("s1", Index("r" * 64, dirs, CHILDREN))
    return cache


def test_a_loaded_index_reads_only_the_directories_asked_for(tmp_path: Path) -> None:
    index = saved(tmp_path).load("s1")
    assert index is not None and index.stored and index.loaded == {}
    assert index.children("a/b") == CHILDREN["a/b"] and list(index.loaded) == ["a/b"]


def test_forget_clears_the_root_until_a_save(tmp_path: Path) -> None:
    cache = saved(tmp_path)
    index = cache.load("s1")
    cache.forget("s1")
    assert cache.load("s1") is None
    assert index is not None
    cache.save("s1", index, ["a"], [])
    assert (cache.load("s1") or Index(None)).root == "r" * 64


def test_an_index_removed_during_a_command_fails_its_capture(tmp_path: Path) -> None:
    limits = CaptureLimits(100, 1 << 20, 1 << 20)
    # a/b gained a directory: a/b's old entries are read when the scan comes,
    # and a's (unchanged, but holding a/b) when the trees are built.
    scan = [[""], ["a"], ["a/b/g", "file", 0o644, 9, 30, 1, None],
            ["a/b/new", "dir", 0o755, 0, 40, 1, None]]
    for removed_before in ("scan", "trees"):
        cache = saved(tmp_path)
        index = cache.load("s1")
        assert index is not None
        capture = Capture(None, index, limits)  # type: ignore[arg-type]
        if removed_before == "scan":
            cache.remove("s1")  # e.g. a forget that could not write removes it
        assert capture.wanted(scan, ScanReport()) == []
        if removed_before == "trees":
            cache.remove("s1")
            assert capture.commit_trees() is None
        assert capture.failure is not None and "index of the files is gone" in capture.failure
        assert not cache.path("s1").exists()  # nothing made anew by the readers
        with pytest.raises(IndexUnreadable):
            index.children("a")


def test_an_index_that_cannot_be_written_is_removed_not_retried(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    cache = HostCache(str(blocked))
    cache.save("s1", Index("r" * 64, {"": Dir.of("t" * 64, 0, {})}, {"": {}}))
    assert cache.load("s1") is None


def test_an_update_of_an_index_removed_meanwhile_leaves_none(tmp_path: Path) -> None:
    cache = saved(tmp_path)
    index = cache.load("s1")
    assert index is not None
    index.read(["a"])
    cache.remove("s1")
    cache.save("s1", index, ["a"], [])  # would hold only a's row
    assert cache.load("s1") is None and not cache.path("s1").exists()


def test_the_digests_sent_are_bounded_by_their_paths_bytes(monkeypatch) -> None:
    monkeypatch.setattr(capture_module, "KNOWN_BYTES", 100)
    dirs = {f"{i:02d}".ljust(40, "x"): Dir.of("t" * 64, 0, {}) for i in range(5)}
    capture = Capture(None, Index("r" * 64, dirs), CaptureLimits(10, 1, 1))  # type: ignore[arg-type]
    capture.scan()
    assert len(capture.known) == 1  # 40 + 32 bytes each: one fits in 100


def test_an_index_from_before_change_records_is_kept_and_then_records_its_watch(
        tmp_path: Path) -> None:
    cache = saved(tmp_path)
    with sqlite3.connect(cache.path("s1")) as db:  # the older schema: copy (root) alone
        db.executescript("CREATE TABLE old AS SELECT root FROM copy; DROP TABLE copy;"
                         " ALTER TABLE old RENAME TO copy;")
    index = cache.load("s1")
    assert index is not None and index.root == "r" * 64 and index.watch is None
    index.watch = "w-1"
    cache.save("s1", index, ["a"], [])
    assert (cache.load("s1") or Index(None)).watch == "w-1"
