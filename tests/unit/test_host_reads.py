"""Changed files read where the host mounts a copy (host_reads.py), on a
real file system: only the regular file the scan reported (same inode,
size and ctime), reached without following a link or blocking; anything
else is left to the supervisor."""

from __future__ import annotations

import os
from pathlib import Path

from executor.workspace.host_reads import chunks, open_as_scanned


def scanned(path: Path) -> list[object]:
    """The entry the supervisor's scan gives a file: [kind, mode, size, inode, ctime_ns, ...]."""
    st = path.lstat()
    return ["file", st.st_mode & 0o7777, st.st_size, st.st_ino, st.st_ctime_ns, None]


def read(mountpoint: Path, path: str, entry: list[object]) -> bytes | None:
    fd = open_as_scanned(str(mountpoint), path, entry)
    return None if fd is None else b"".join(chunks(fd))


def test_the_file_the_scan_saw_is_read_byte_for_byte(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    data = os.urandom(3 * 1024 * 1024 + 5)
    (tmp_path / "a" / "b" / "f").write_bytes(data)
    (tmp_path / "a" / "b" / "f").chmod(0)  # the host reads what the tenant made unreadable
    assert read(tmp_path, "a/b/f", scanned(tmp_path / "a" / "b" / "f")) == data
    (tmp_path / "top").write_bytes(b"x")
    assert read(tmp_path, "top", scanned(tmp_path / "top")) == b"x"


def test_another_file_than_the_one_scanned_is_left_to_the_supervisor(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"one")
    entry = scanned(f)
    f.chmod(0o600)  # a new ctime
    assert read(tmp_path, "f", entry) is None
    entry = scanned(f)
    os.replace(tmp_path / "f", tmp_path / "g")
    (tmp_path / "f").write_bytes(b"two")  # another inode under the name, the same size
    assert read(tmp_path, "f", entry) is None
    assert read(tmp_path, "f", [*scanned(tmp_path / "f")[:2], 4, *scanned(tmp_path / "f")[3:]]) \
        is None  # another size


def test_links_and_special_files_are_never_followed_nor_waited_on(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"host")
    home = tmp_path / "home"
    home.mkdir()
    (home / "d").symlink_to(outside)
    (home / "l").symlink_to(outside / "secret")
    entry = scanned(outside / "secret")
    assert read(home, "d/secret", entry) is None
    assert read(home, "l", entry) is None
    os.mkfifo(home / "p")
    assert read(home, "p", ["file", 0o644, 0, *scanned(home / "p")[3:]]) is None
    assert read(home, "missing/f", entry) is None
