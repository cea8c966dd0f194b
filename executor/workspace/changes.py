"""Which directories of a session's copy changed since its last capture.

A command's capture needs to scan only the directories something was
done in, not the whole home (DESIGN.md §14). This host learns them from
the kernel: each session's loop image is marked by a fanotify group of
its own (fanotify.py) as soon as a container of the session has it
mounted, before that container can be handed a command. The queue then
holds every change any process makes on that file system.

A record is trusted only when it is complete since the index it is
compared with was committed: the index remembers the ``token`` of the
record that was running when its scan was taken, and a record is only
used while its token is the one in the index. A token is new whenever a
record starts (this process started, the session's group was closed or
its queue overflowed), so an index committed under any other record
(another executor's, one before a restart) gets a full walk. Between two
commands the file system is either mounted, and marked, or not mounted at
all (nothing writes it then); the only writers of a mounted copy that are
not marked first are restores, whose own scan starts a new index.

A file with another name elsewhere can change under that name without
an event naming its directory: a file written (or re-moded) is listed in
the directory it is in when the command ended, and a record in which a
file with several names changed is not used (a full walk finds it by its
ctime). Only runc's containers are recorded (RECORDED_RUNTIMES).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import secrets
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .fanotify import Events, Group, Unavailable, open_handle

log = logging.getLogger(__name__)
# Groups held at once (each is a file descriptor and a queue in the
# kernel; the kernel allows 128 a user): past it, the session whose copy
# was mounted least recently loses its own, and its next capture walks
# the home.
MAX_RECORDS = 64
# Directories and files a record names before the capture walks the home instead.
MAX_DIRECTORIES = 10_000
# Runtimes whose writes are the tenant's own system calls on the host's file
# system, so none is missed: gVisor's sentry keeps files open and maps them
# for the tenant, and may write them back after the command's processes are gone.
RECORDED_RUNTIMES = frozenset({"runc"})


@dataclass(frozen=True)
class _Record:
    token: str
    group: Group
    mountpoint: str


class ChangeRecords:
    """One per executor: the change records of the sessions whose copies
    this host has mounted."""

    def __init__(self, mountpoint: Callable[[str], str | None],
                 max_records: int = MAX_RECORDS) -> None:
        self._mountpoint = mountpoint  # where the engine mounts a session's copy
        self._max = max_records
        self._prefix = secrets.token_hex(6)
        self._serial = 0
        self._records: OrderedDict[str, _Record] = OrderedDict()
        self._lock = threading.Lock()
        self._unavailable = False

    def watch(self, session_id: str, runtime: str) -> None:
        """A container of the session was started under ``runtime`` and has
        its copy mounted, and has not been handed a command: record from
        here on."""
        if self._unavailable:
            return
        mountpoint = self._mountpoint(session_id)
        with self._lock:
            record = self._records.get(session_id)
            if runtime not in RECORDED_RUNTIMES or mountpoint is None:
                self._stop(session_id)
            elif record is None:
                self._start(session_id, mountpoint)
            else:
                # Mounted elsewhere now (a copy born blank is mounted first
                # through the blank's volume): the same file system, whose
                # mark is on the file system, not on a mount.
                if record.mountpoint != mountpoint:
                    record = dataclasses.replace(record, mountpoint=mountpoint)
                    self._records[session_id] = record
                self._mark(session_id, record)

    def _start(self, session_id: str, mountpoint: str) -> None:
        self._stop(session_id)
        try:
            group = Group()
        except Unavailable as exc:
            self._refused(session_id, exc)
            return
        self._serial += 1
        record = _Record(f"{self._prefix}-{self._serial}", group, mountpoint)
        self._records[session_id] = record
        self._mark(session_id, record)
        while len(self._records) > self._max:
            self._stop(next(iter(self._records)))

    def _mark(self, session_id: str, record: _Record) -> None:
        try:
            if not os.path.ismount(record.mountpoint):
                raise Unavailable(0, f"the copy is not mounted at {record.mountpoint}")
            record.group.mark(record.mountpoint)
        except Unavailable as exc:
            self._stop(session_id)
            self._refused(session_id, exc)
            return
        self._records.move_to_end(session_id)

    def _refused(self, session_id: str, exc: Unavailable) -> None:
        # EPERM, EINVAL (a kernel before 5.17), ENOSYS: never here, so stop trying.
        if exc.errno in (errno.EPERM, errno.EINVAL, errno.ENOSYS):
            self._unavailable = True
            log.warning("no change records on this host (%s): every capture walks the whole "
                        "home", exc)
        else:
            log.info("session_id=%s: no change record: %s", session_id, exc)

    def mountpoint(self, session_id: str) -> str | None:
        """Where the session's copy is mounted, while a record of it runs
        (so under a runtime whose writes are on this file system, at once)."""
        with self._lock:
            record = self._records.get(session_id)
            return record.mountpoint if record is not None else None

    def token(self, session_id: str) -> str | None:
        """The running record's token (None: none is running)."""
        with self._lock:
            record = self._records.get(session_id)
            return record.token if record is not None else None

    def take(self, session_id: str, token: str | None) -> list[str] | None:
        """The directories changed since the last ``take`` (home-relative,
        '' the home), and forgets them; None when the record is not the
        one ``token`` names or cannot tell (then the capture walks the home)."""
        with self._lock:
            record = self._records.get(session_id)
            if record is None:
                return None
            events = Events()
            try:
                record.group.drain(events)
            except OSError as exc:
                log.warning("session_id=%s: change record unreadable: %s", session_id, exc)
                self._stop(session_id)
                return None
            if events.overflowed:
                # Incomplete: a new record (a new token) from here on, which
                # the index this capture's walk gives is complete for.
                log.info("session_id=%s: change record overflowed", session_id)
                self._start(session_id, record.mountpoint)
                return None
            if token is None or token != record.token:
                return None
            return _directories(record.mountpoint, events)

    def close(self) -> None:
        with self._lock:
            for session_id in list(self._records):
                self._stop(session_id)

    def _stop(self, session_id: str) -> None:
        record = self._records.pop(session_id, None)
        if record is not None:
            record.group.close()


def _directories(mountpoint: str, events: Events) -> list[str] | None:
    if len(events.directories) + len(events.selves) + len(events.written) > MAX_DIRECTORIES:
        return None
    try:
        mount_fd = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _named(mount_fd, os.path.realpath(mountpoint), events)
    except OSError as exc:
        log.warning("change record not read: %s", exc)
        return None
    finally:
        os.close(mount_fd)


def _named(mount_fd: int, mountpoint: str, events: Events) -> list[str] | None:
    found: set[str] = set()
    for handle in events.directories | events.selves:
        path = _path(mount_fd, mountpoint, handle, directory=True)
        if path is False:
            return None
        if path is None:
            continue  # removed since: its parent's event names it
        found.add(str(path))
        if handle in events.selves and path:
            found.add(str(path).rpartition("/")[0])  # its mode is in its parent's listing
    # A file written under one name is listed where it is now: it may have
    # lost that name since (to a rename over it, say) and kept another,
    # whose directory saw no event. One with several names: walk the home.
    for handle in events.written:
        path = _path(mount_fd, mountpoint, handle, directory=False)
        if path is False:
            return None
        if path is not None:
            found.add(str(path).rpartition("/")[0])
    return sorted(found)


def _path(mount_fd: int, mountpoint: str, handle: bytes,
          directory: bool) -> str | None | bool:
    """A directory's path in the home now, or a file's with one name; None
    if it was removed (or is not of that kind), False if it cannot be named
    (then the home is walked)."""
    fd = open_handle(mount_fd, handle)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        if st.st_nlink == 0 or stat.S_ISDIR(st.st_mode) != directory:
            return None
        if not directory and (not stat.S_ISREG(st.st_mode) or st.st_nlink > 1):
            return None if not stat.S_ISREG(st.st_mode) else False
        where = os.readlink(f"/proc/self/fd/{fd}".encode())
    except OSError:
        return False
    finally:
        os.close(fd)
    root = os.fsencode(mountpoint)
    if where == root:
        return ""
    if not where.startswith(root + b"/"):
        return False
    try:
        return where[len(root) + 1:].decode("utf-8")
    except UnicodeDecodeError:
        return False
