"""What a host keeps beside its copies of sessions' files (volumes.py), so
that copies can be removed safely while others are being used:

- the host-wide lock that orders every change to the set of copies (making,
  attaching, detaching, removing) across the executors sharing the volumes
  directory;
- a use mark per copy: a shared ``flock`` on ``<volume>.use`` held by
  whoever uses the copy (a command from before its files are brought here
  until it completed, a warm start until its container holds the volume).
  A copy is removed only under an exclusive lock on it, so never between a
  restore and the container that follows it, in this process or another;
  a process that dies lets go of its marks with it;
- whose copy it is: ``<volume>.user`` holds the owner's id, written only for
  a session whose files are in the database (a copy that is the only place
  of its files is never counted, never evicted); its mtime is the copy's
  last use, which picks the least recently used copy to evict.

Only the executor writes these files, from what the database says (a
tenant never reaches the volumes directory).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import VolumeError

USE_SUFFIX = ".use"
USER_SUFFIX = ".user"
MiB = 1024 * 1024


class HostCopies:
    def __init__(self, state_dir: Path, volume_name: Callable[[str], str]) -> None:
        self.state_dir = state_dir
        self._name = volume_name  # session id -> volume name (validates the id)
        self._lock = threading.Lock()

    def _path(self, session_id: str, suffix: str) -> Path:
        return self.state_dir / f"{self._name(session_id)}{suffix}"

    @contextmanager
    def locked(self) -> Iterator[None]:
        # The thread lock orders this executor's workers; the file lock
        # orders several executor processes on one host (losetup --find
        # and the volume check are not atomic).
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._lock, open(self.state_dir / ".lock", "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            yield

    @contextmanager
    def hold(self, session_id: str, owner: str | None) -> Iterator[None]:
        """Marks the copy as in use while the block runs; ``owner``: the
        session's user when its files are in the database (None: unknown,
        or only here). Never waits on the host-wide lock."""
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._path(session_id, USE_SUFFIX)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits out a removal in progress
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the copy was removed meanwhile, with its mark: mark anew
        try:
            if owner is not None:
                self._mark_owner(session_id, owner)
            yield
        finally:
            os.close(fd)

    def _mark_owner(self, session_id: str, owner: str) -> None:
        path = self._path(session_id, USER_SUFFIX)
        try:
            if path.read_text() == owner:
                os.utime(path)  # used now
                return
        except FileNotFoundError:
            pass
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(owner)
        os.replace(tmp, path)

    def owner_of(self, session_id: str) -> str | None:
        try:
            return self._path(session_id, USER_SUFFIX).read_text() or None
        except (FileNotFoundError, UnicodeDecodeError):
            return None

    def least_recent_first(self, owner: str, sessions: list[str]) -> list[str]:
        """Those of ``sessions`` whose copy is ``owner``'s, least recently used first."""
        found = []
        for session_id in sessions:
            path = self._path(session_id, USER_SUFFIX)
            try:
                if path.read_text() == owner:
                    found.append((path.stat().st_mtime_ns, session_id))
            except (FileNotFoundError, UnicodeDecodeError):
                continue
        return [session_id for _, session_id in sorted(found)]

    @contextmanager
    def unused(self, session_id: str) -> Iterator[bool]:
        """Under ``locked``: whether nobody uses the copy; while True, nobody
        can start to. ``forget`` inside the block drops the marks."""
        path = self._path(session_id, USE_SUFFIX)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def forget(self, session_id: str) -> None:
        """The copy is gone: so are its owner and its use mark (unlinked while
        ``unused`` holds it, so a waiting ``hold`` marks a new file)."""
        self._path(session_id, USER_SUFFIX).unlink(missing_ok=True)
        self._path(session_id, USE_SUFFIX).unlink(missing_ok=True)


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged writer may still use on ``directory``'s file system."""
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


def check_floor(directory: Path, floor_bytes: int) -> None:
    """Refuses to make an image when the volumes' file system is below the floor."""
    if floor_bytes <= 0:
        return
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    free = free_bytes(directory)
    if free < floor_bytes:
        raise HostDiskLow(
            f"this executor host is low on disk space ({free // MiB} MiB free where session "
            f"files are kept, below its floor of {floor_bytes // MiB} MiB), so it makes no new "
            "copy of a session's files; the session's files are safe in the database: submit "
            "the command again later, or ask the operator to free space on the host "
            "(PG_SHELL_MIN_FREE_MB)")


class HostDiskLow(VolumeError):
    """The volumes' file system has less free space than the floor."""

    default_message = "the executor host is low on disk space"
