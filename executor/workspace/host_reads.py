"""Changed files read where the host mounts the session's copy, rather
than sent by the supervisor through the container's attach stream (which
took 10-30 ms a megabyte on a busy host, where reading it here takes 1).

Only once the command's processes are all gone (the capture runs after
the supervisor killed and reaped them) and only under runc, whose writes
are the tenant's own system calls on this file system (changes.py:
RECORDED_RUNTIMES; gVisor may write a file back later). A path is opened
one component at a time from the mount, never following a link and never
blocking (O_NOFOLLOW, O_NONBLOCK), and used only if it is a regular file
with the inode, size and ctime the supervisor's scan reported for it: a
tenant cannot set a ctime, so it is the file the scan saw, as it was.
Anything else (a path that cannot be opened so, another file) is left to
the supervisor, as before.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import Any

READ_BYTES = 1024 * 1024


def open_as_scanned(mountpoint: str, path: str, entry: list[Any]) -> int | None:
    """A descriptor of the file at ``path`` (home-relative, validated) under
    ``mountpoint`` if it is the regular file ``entry`` ([kind, mode, size,
    inode, ctime_ns, ...]) describes; None otherwise."""
    *directories, name = path.split("/")
    try:
        at = os.open(mountpoint, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    fd = None
    try:
        for directory in directories:
            inner = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                            dir_fd=at)
            os.close(at)
            at = inner
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=at)
        st = os.fstat(fd)
        if (stat.S_ISREG(st.st_mode) and st.st_size == entry[2] and st.st_ino == entry[3]
                and st.st_ctime_ns == entry[4]):
            fd, found = None, fd
            return found
        return None
    except OSError:
        return None
    finally:
        os.close(at)
        if fd is not None:
            os.close(fd)


def chunks(fd: int) -> Iterator[bytes]:
    """The file's bytes (OSError if it cannot be read); closes it."""
    try:
        while chunk := os.read(fd, READ_BYTES):
            yield chunk
    finally:
        os.close(fd)
