"""Blank home images for loop volumes (volumes.py): a fixed-size ext4 file
system whose root belongs to the sandbox user, with nothing in it.

Making one (truncate, mkfs.ext4, debugfs) took 12-20 ms of a new session's
first command, so one is kept made ahead: ``Spare.take`` hands it to the
next new session and a thread makes the next. A spare has never been
attached or mounted, so it is as blank as one made on the spot; one of
another size (the quota changed) is not used.

An image is sparse: it takes on the host's disk what its file system holds
(8.4 MiB for a blank 256 MiB one), and grows as the session writes, up to
its size. The quota is the file system's size all the same: a write past
it fails with ENOSPC inside the container, whatever the file's blocks on
the host. (The images were made with fallocate before, but mkfs.ext4
discards the whole file first, which punched the allocation out again:
they were as sparse, by accident.) Sessions' volumes are mounted with
``discard``, so what a session deletes goes back to the host. The price is
that the host's disk can be promised to more sessions than it holds: the
free-space floor (volumes.py) is the margin, and no image is made below it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from .errors import VolumeError
from .hardening import SANDBOX_GID, SANDBOX_UID

log = logging.getLogger(__name__)

SPARE_NAME = ".spare.ext4"  # not pg-shell-home-<session>: never listed as a session's


def run_tool(*argv: str) -> str:
    """Runs one of the host's tools (losetup, mkfs.ext4, …); VolumeError if it fails."""
    try:
        done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", "") or ""
        raise VolumeError(f"{argv[0]} failed: {stderr.strip() or exc}") from exc
    return done.stdout


def make_blank(path: Path, size_bytes: int) -> None:
    """Makes a blank image at ``path``, under a temporary name first so a
    crash never leaves a half-made file system under the real one."""
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    try:
        run_tool("truncate", "--size", str(size_bytes), str(tmp))
        # -m 0: no blocks reserved for root, the user is the sandbox user.
        # root_owner: the user owns the root dir, i.e. their home.
        run_tool("mkfs.ext4", "-q", "-F", "-m", "0",
                 "-E", f"root_owner={SANDBOX_UID}:{SANDBOX_GID}", str(tmp))
        # A fresh home is empty: drop mkfs's lost+found (fsck recreates it
        # when it needs one).
        run_tool("debugfs", "-w", "-R", "rmdir lost+found", str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class Spare:
    """The blank image made ahead in ``state_dir``. ``locked`` is the
    volumes' host-wide lock: taking and making are done under it, so two
    executors sharing the directory never hand one spare to two sessions,
    and a crash leaves at most a temporary file the next making replaces."""

    def __init__(self, state_dir: Path, size_bytes: int,
                 locked: Callable[[], AbstractContextManager[None]],
                 may_make: Callable[[], None] = lambda: None) -> None:
        self.path = state_dir / SPARE_NAME
        self._size = size_bytes
        self._locked = locked
        self._may_make = may_make  # raises VolumeError when no image may be made now
        self._making = threading.Lock()  # one refill at a time in this process

    def take(self, target: Path) -> bool:
        """Moves the spare to ``target`` (the caller holds the lock); False
        when there is none of this size. Either way a new one is started."""
        try:
            taken = self.path.stat().st_size == self._size
            if taken:
                os.replace(self.path, target)
        except FileNotFoundError:
            taken = False
        self.refill()
        return taken

    def refill(self) -> None:
        """Makes a spare in the background unless one is there or being made."""
        if self._making.acquire(blocking=False):
            threading.Thread(target=self._make, name="spare-image", daemon=True).start()

    def _make(self) -> None:
        try:
            if not self.path.parent.is_dir():
                return  # removed with its executor's state: nothing to refill
            with self._locked():
                if not (self.path.exists() and self.path.stat().st_size == self._size):
                    self._may_make()
                    make_blank(self.path, self._size)
        except (OSError, VolumeError) as exc:  # the next new session makes its own
            log.warning("no spare home image: %s", exc)
        finally:
            self._making.release()
