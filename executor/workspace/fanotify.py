"""The kernel's change record of one file system (fanotify(7)), as the capture uses it.

A group marks a whole file system (FAN_MARK_FILESYSTEM: a session's loop
image) and is told, for every change made on it by anyone, the directory
the change happened in and the name changed, as file handles
(FAN_REPORT_DFID_NAME), plus the handle of the object itself
(FAN_REPORT_FID, and FAN_REPORT_TARGET_FID for the object a name was
created, removed or moved for). The events are generated in the writing system call
itself, so once the writers are gone, everything they did is in the queue.
Needs CAP_SYS_ADMIN (and CAP_DAC_READ_SEARCH to open handles): a rootful
executor's. A queue that overflowed says so: the record is then incomplete.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass, field

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                ctypes.c_char_p]
_libc.open_by_handle_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]

FAN_CLOEXEC, FAN_NONBLOCK = 0x1, 0x2
FAN_REPORT_FID, FAN_REPORT_DIR_FID, FAN_REPORT_NAME = 0x200, 0x400, 0x800
FAN_REPORT_TARGET_FID = 0x1000  # Linux 5.17: the object of a create, delete or move too
FAN_MARK_ADD, FAN_MARK_FILESYSTEM = 0x1, 0x100
FAN_MODIFY, FAN_ATTRIB, FAN_CLOSE_WRITE = 0x2, 0x4, 0x8
FAN_MOVED_FROM, FAN_MOVED_TO, FAN_CREATE, FAN_DELETE = 0x40, 0x80, 0x100, 0x200
FAN_Q_OVERFLOW, FAN_ONDIR = 0x4000, 0x40000000
# Everything that changes what a scan of a directory finds: its entries
# (created, deleted, moved), their bytes, sizes and modes.
CHANGES = (FAN_MODIFY | FAN_ATTRIB | FAN_CLOSE_WRITE | FAN_MOVED_FROM | FAN_MOVED_TO
           | FAN_CREATE | FAN_DELETE | FAN_ONDIR)
# What changes a file's bytes or mode, or its count of names.
CONTENT = FAN_MODIFY | FAN_ATTRIB | FAN_CLOSE_WRITE
INFO_FID, INFO_DFID_NAME = 1, 2
METADATA = struct.Struct("=IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
INFO = struct.Struct("=BBH")  # info_type, pad, len
HANDLE = struct.Struct("=Ii")  # struct file_handle: handle_bytes, handle_type
FSID_BYTES = 8
MAX_HANDLE_BYTES = 128  # MAX_HANDLE_SZ
READ_BYTES = 256 * 1024


class Unavailable(OSError):
    """The kernel would not give this process a change record."""


@dataclass
class Events:
    """What a group's queue held: directories (their handles) that changed,
    the names changed in them, and the objects whose bytes or mode changed."""

    overflowed: bool = False
    directories: set[bytes] = field(default_factory=set)
    selves: set[bytes] = field(default_factory=set)  # directories changed themselves (name ".")
    written: set[bytes] = field(default_factory=set)  # files written, re-moded or re-linked


class Group:
    """One fanotify group, marking file systems (one, as the capture uses it)."""

    def __init__(self) -> None:
        flags = (FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_FID | FAN_REPORT_DIR_FID
                 | FAN_REPORT_NAME | FAN_REPORT_TARGET_FID)
        fd = _libc.fanotify_init(flags, os.O_RDONLY)
        if fd < 0:
            code = ctypes.get_errno()
            raise Unavailable(code, f"fanotify_init: {os.strerror(code)}")
        self.fd: int = fd

    def mark(self, path: str) -> None:
        """Records every change on the file system ``path`` is on (idempotent)."""
        if _libc.fanotify_mark(self.fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, CHANGES, -100,
                               os.fsencode(path)) < 0:
            code = ctypes.get_errno()
            raise Unavailable(code, f"fanotify_mark {path}: {os.strerror(code)}")

    def drain(self, into: Events) -> None:
        """Adds what the queue holds now to ``into``."""
        while True:
            try:
                data = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                return
            if not data:
                return
            try:
                _parse(data, into)
            except (ValueError, struct.error) as exc:  # never from a kernel that keeps its word
                raise OSError(f"an event that does not parse: {exc}") from exc

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _parse(data: bytes, into: Events) -> None:
    at = 0
    while at + METADATA.size <= len(data):
        length, _vers, _reserved, meta_len, mask, fd, _pid = METADATA.unpack_from(data, at)
        if length < METADATA.size:
            break
        if fd >= 0:  # not an event of a FID group; never expected, never leaked
            os.close(fd)
        if mask & FAN_Q_OVERFLOW:
            into.overflowed = True
        parent = name = obj = None
        info = at + meta_len
        while info + INFO.size <= at + length:
            kind, _pad, info_len = INFO.unpack_from(data, info)
            if info_len < INFO.size:
                break
            handle_at = info + INFO.size + FSID_BYTES
            size, _type = HANDLE.unpack_from(data, handle_at)
            if size > MAX_HANDLE_BYTES or handle_at + HANDLE.size + size > info + info_len:
                raise ValueError(f"a file handle of {size} bytes")
            handle = data[handle_at:handle_at + HANDLE.size + size]
            if kind == INFO_DFID_NAME:
                end = data.index(b"\0", handle_at + len(handle), info + info_len)
                parent, name = handle, data[handle_at + len(handle):end]
            elif kind == INFO_FID:
                obj = handle
            info += info_len
        if parent is not None:
            if name == b".":
                into.selves.add(parent)
            else:
                into.directories.add(parent)
        if obj is not None and not mask & FAN_ONDIR and mask & CONTENT:
            into.written.add(obj)
        at += length


def open_handle(mount_fd: int, handle: bytes) -> int | None:
    """An O_PATH descriptor of the object ``handle`` names on ``mount_fd``'s
    file system; None if it is gone."""
    fd = _libc.open_by_handle_at(mount_fd, ctypes.create_string_buffer(handle, len(handle)),
                                 os.O_PATH | os.O_CLOEXEC)
    if fd >= 0:
        return int(fd)
    code = ctypes.get_errno()
    if code in (errno.ESTALE, errno.ENOENT):
        return None
    raise OSError(code, f"open_by_handle_at: {os.strerror(code)}")
