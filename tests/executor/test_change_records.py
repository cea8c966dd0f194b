"""This host's record of what changed in a session's copy (the kernel's
fanotify on the copy's own file system): which directories it names, and
when it must not be trusted, so the capture walks the whole home instead.
A real ext4 image on a loop device, written by real processes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.workspace.changes import ChangeRecords
from tests.conftest import require

SESSION = "s1"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A mounted ext4 file system of its own, as a session's loop volume is."""
    require(os.geteuid() == 0, "root (a loop mount and fanotify)")
    image, mountpoint = tmp_path / "home.ext4", tmp_path / "home"
    mountpoint.mkdir()
    subprocess.run(["truncate", "-s", "32M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-N", "65536", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop,nosuid,nodev", str(image), str(mountpoint)], check=True)
    try:
        (mountpoint / "a" / "b").mkdir(parents=True)
        (mountpoint / "a" / "b" / "f").write_text("one")
        (mountpoint / "c").mkdir()
        yield mountpoint
    finally:
        subprocess.run(["umount", "--lazy", str(mountpoint)], check=False)


@pytest.fixture
def records(home: Path) -> Iterator[ChangeRecords]:
    made = ChangeRecords(lambda _session_id: str(home))
    made.watch(SESSION, "runc")
    assert made.token(SESSION) is not None, "no change record on this host"
    made.take(SESSION, made.token(SESSION))  # from here on
    yield made
    made.close()


def in_shell(home: Path, script: str) -> None:
    """Another process changes the home, as a command does."""
    subprocess.run(["sh", "-ec", script], cwd=home, check=True)


def test_the_directories_changed_in_are_named_and_nothing_else(home, records) -> None:
    token = records.token(SESSION)
    in_shell(home, "echo two >> a/b/f")
    assert records.take(SESSION, token) == ["a/b"]
    in_shell(home, "mkdir c/d && touch c/d/x && mv a/b c/moved && rm -r a")
    # a/b is c/moved now (c names it: the capture walks it, a directory its
    # index does not hold there); a was removed (the home names it).
    assert records.take(SESSION, token) == ["", "c", "c/d"]
    assert records.take(SESSION, token) == []


def test_a_mode_changed_names_the_directory_that_lists_it(home, records) -> None:
    token = records.token(SESSION)
    in_shell(home, "chmod 700 a/b")
    assert set(records.take(SESSION, token) or ()) >= {"a"}
    in_shell(home, "chmod 600 a/b/f")
    assert records.take(SESSION, token) == ["a/b"]


def test_a_file_with_two_names_changed_makes_the_home_walked(home, records) -> None:
    token = records.token(SESSION)
    in_shell(home, "ln a/b/f c/link")
    assert records.take(SESSION, token) is None  # its count of names changed
    in_shell(home, "echo more >> c/link")  # a/b/f changed too, and a/b saw no event
    assert records.take(SESSION, token) is None
    in_shell(home, "rm c/link")  # one name again: listed where it is
    assert records.take(SESSION, token) == ["a/b", "c"]
    in_shell(home, "echo again >> a/b/f")
    assert records.take(SESSION, token) == ["a/b"]


def test_a_file_written_under_a_name_it_lost_is_listed_where_it_is(home, records) -> None:
    token = records.token(SESSION)
    in_shell(home, "ln a/b/f c/link && echo other > c/tmp")
    records.take(SESSION, token)
    # Written as c/link, which then names another file: a/b/f changed, and
    # a/b saw no event; removing the name is no better.
    for lose in ("mv c/tmp c/link", "rm c/link"):
        in_shell(home, f"echo more >> c/link && {lose}")
        assert "a/b" in (records.take(SESSION, token) or ()), lose
        in_shell(home, "ln -f a/b/f c/link && echo other > c/tmp")
        records.take(SESSION, token)


def test_a_record_that_is_not_the_index_s_names_nothing(home, records) -> None:
    in_shell(home, "touch c/x")
    assert records.take(SESSION, None) is None  # an index from before this record
    assert records.take(SESSION, "another-executor-1") is None
    assert records.take("another-session", records.token(SESSION)) is None


def test_an_overflowed_record_is_dropped_and_a_new_one_has_another_token(home,
                                                                         records) -> None:
    token = records.token(SESSION)
    # More events than the kernel's queue holds (16,384 by default): one
    # a file made (its creation and writing are one event).
    limit = int(Path("/proc/sys/fs/fanotify/max_queued_events").read_text())
    in_shell(home, f"mkdir many && cd many && seq 1 {limit + 100} | xargs touch")
    assert records.take(SESSION, token) is None
    # A new record from here on, whose token the index of this capture keeps.
    assert records.token(SESSION) not in (None, token)
    in_shell(home, "touch c/x")
    assert records.take(SESSION, records.token(SESSION)) == ["c"]


def test_a_container_under_another_runtime_stops_the_record(home, records) -> None:
    records.watch(SESSION, "runsc")
    assert records.token(SESSION) is None
    records.watch(SESSION, "runc")
    assert records.token(SESSION) is not None


def test_a_copy_that_is_not_mounted_gets_no_record(tmp_path) -> None:
    records = ChangeRecords(lambda _session_id: str(tmp_path))  # a plain directory
    records.watch(SESSION, "runc")
    assert records.token(SESSION) is None
    assert records.take(SESSION, None) is None
