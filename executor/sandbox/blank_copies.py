"""Blank copies: a loop image made ahead for a session that does not exist
yet, attached and given an engine volume of its own, so that a container
can be started on it ahead too (worker/blank_start.py). A new session's
first command then finds its container running, as a warm one.

When a session takes one (``LoopVolumes.adopt_blank``) its image is
renamed to the session's, and the session's own volume is made on the
same loop device; the blank volume stays mounted by the container started
on it until that container is gone. A marker beside the session's copy
(``<volume>.blank``) names the blank volume meanwhile: the copy is not
released or evicted while that volume exists (the engine does not know
that the two volumes are one file system).

A blank copy belongs to the process that made it, which holds a shared
``flock`` on ``<blank volume>.use`` until a session takes the copy or it
is dropped; one whose lock can be taken was left by a process that is
gone, and the next sweep removes it, as it removes blank volumes whose
image a session took and that no container uses any more.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from .blank_images import run_tool
from .engine import engine_errors
from .errors import VolumeError
from .loop_devices import loops_of

log = logging.getLogger(__name__)
BLANK_PREFIX = "pg-shell-blank-"
BLANK_LABEL = "pg-shell.blank"
IMAGE_SUFFIX = ".ext4"
USE_SUFFIX = ".use"
ADOPTED_SUFFIX = ".blank"


@dataclass
class BlankCopy:
    volume: str  # the engine's volume on it: pg-shell-blank-<token>
    image: Path
    loop: str
    mountpoint: str  # where the engine mounts the volume while a container uses it
    lock_fd: int  # the shared lock that says this process owns it

    def let_go(self) -> None:
        """This process no longer owns the copy (taken, or dropped)."""
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)
        self.lock_fd = -1
        (self.image.parent / f"{self.volume}{USE_SUFFIX}").unlink(missing_ok=True)


def new_name() -> str:
    return f"{BLANK_PREFIX}{secrets.token_hex(8)}"


def own(state_dir: Path, name: str) -> int:
    """The shared lock of a blank copy about to be made by this process."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(state_dir / f"{name}{USE_SUFFIX}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def mark_adopted(marker: Path, blank_volume: str) -> None:
    marker.write_text(blank_volume)


def still_mounted_by_blank(client: docker.DockerClient, marker: Path) -> bool:
    """Whether the blank volume a session's copy was born on still exists
    (its container may mount the copy through it); forgets the marker once
    it is gone."""
    try:
        name = marker.read_text()
    except FileNotFoundError:
        return False
    with engine_errors(f"cannot look up volume {name}", refused=VolumeError):
        try:
            client.volumes.get(name)
            return True
        except docker.errors.NotFound:
            marker.unlink(missing_ok=True)
            return False


def sweep(client: docker.DockerClient, state_dir: Path) -> None:
    """Under the host-wide lock: removes blank copies whose process is gone,
    and blank volumes no container uses whose image a session took."""
    for image in state_dir.glob(f"{BLANK_PREFIX}*{IMAGE_SUFFIX}"):
        name = image.name[:-len(IMAGE_SUFFIX)]
        use = state_dir / f"{name}{USE_SUFFIX}"
        fd = os.open(use, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # its process is alive
        try:
            drop(client, name, image)
            use.unlink(missing_ok=True)
            log.info("removed blank copy %s left by an executor that is gone", name)
        except VolumeError as exc:  # its container is still there: the next sweep
            log.info("blank copy %s not removed yet: %s", name, exc)
        finally:
            os.close(fd)
    with engine_errors("cannot list volumes", refused=VolumeError):
        volumes = client.volumes.list(filters={"label": BLANK_LABEL})
    for volume in volumes:
        if not (state_dir / f"{volume.name}{IMAGE_SUFFIX}").exists():
            with contextlib.suppress(VolumeError):  # in use: the next sweep
                remove_volume(client, volume.name)


def drop(client: docker.DockerClient, name: str, image: Path) -> None:
    """Removes a blank copy no session took: its volume (VolumeError while
    a container uses it), its loop device and its image."""
    remove_volume(client, name)
    if not image.exists():
        return
    for loop in loops_of(image):
        run_tool("losetup", "--detach", loop)
    image.unlink(missing_ok=True)


def remove_volume(client: docker.DockerClient, name: str) -> None:
    with engine_errors(f"cannot remove volume {name}", refused=VolumeError):
        try:
            client.volumes.get(name).remove()
        except docker.errors.NotFound:
            return
