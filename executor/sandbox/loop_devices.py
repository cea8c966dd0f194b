"""Which loop devices back an image, as the kernel lists them in sysfs.

Read from /sys rather than asked of `losetup --associated`: the first
command of a session's turn asks, and a process started for each answer
cost about 3 ms of the host's CPU per command (bench.executor, 2 cores).
"""

from __future__ import annotations

import os
from pathlib import Path

SYS_BLOCK = Path("/sys/block")


def loops_of(image: Path) -> list[str]:
    """The loop devices (``/dev/loopN``) attached to ``image``, matched by
    device and inode as `losetup --associated` matches them (a path the
    kernel shows may name the file through another link, or a deleted one)."""
    try:
        wanted = image.stat()
    except FileNotFoundError:
        return []
    found = []
    for backing in SYS_BLOCK.glob("loop*/loop/backing_file"):
        try:
            attached = os.stat(backing.read_text().rstrip("\n"))
        except OSError:
            continue  # detached meanwhile, or its file deleted
        if (attached.st_dev, attached.st_ino) == (wanted.st_dev, wanted.st_ino):
            found.append(f"/dev/{backing.parent.parent.name}")
    return sorted(found)
