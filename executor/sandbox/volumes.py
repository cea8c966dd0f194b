"""Session volumes: the only writable storage a command sees (besides /tmp).

Two kinds, chosen by ``Sandbox(disk_quota=...)``:

* "loop" (default, rootful engine): volumes have no size limit of their own, so
  each session gets a fixed-size ext4 image file under ``state_dir``,
  attached to a loop device, and a Docker ``local`` volume with
  ``type=ext4, device=/dev/loopN``. The filesystem's size *is* the quota:
  writes past it fail with ENOSPC. (Docker's local driver rejects ``o=loop``,
  so the loop device is attached here first.) Needs root on the host.
* "none": a plain named volume, no quota. For rootless engines, where the
  executor cannot attach loop devices; pair it with a quota on the engine's
  data directory if the host has one.

Host paths here are built only from the validated session id, never from
anything a tenant controls inside the container.

Owner: every volume belongs to the sandbox user of hardening.py before a
container of its session starts. Volumes made here are its from the start
(mkfs's root owner; a plain one is seeded from the image's home); an older
executor's belong to its user, 1000:1000, and are handed over once, in a
container (ownership.py), never from the host. A marker beside the volume
records that it is the current user's, so the check costs one small file
read per container.

Copies are a cache (the files are in the database, DESIGN.md §9), so a
host bounds them (host_copies.py): at most ``per_user`` copies of one
user's sessions (making one more removes that user's least recently used
copy that nobody uses), none made while the volumes' file system has less
than ``floor_bytes`` free, and none kept for an archived session (the
executor and the cleanup agent remove those).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import docker
import docker.errors

from . import blank_copies
from .blank_copies import BlankCopy, remove_volume
from .blank_images import Spare, make_blank, run_tool
from .engine import engine_errors
from .errors import InvalidSessionId, VolumeError
from .hardening import SANDBOX_USER
from .host_copies import HostCopies, check_floor
from .loop_devices import loops_of
from .ownership import hand_over

log = logging.getLogger(__name__)
VOLUME_PREFIX = "pg-shell-home-"
SESSION_LABEL = "pg-shell.session-id"
# Docker volume names allow [a-zA-Z0-9][a-zA-Z0-9_.-]; the id also becomes a
# file name, so nothing else (no "/", no leading ".") is accepted.
SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
DEFAULT_STATE_DIR = "/var/lib/pg-shell/volumes"
# Beside the volumes, executor/workspace/cache.py keeps what this host knows
# about each copy; a copy removed for good takes that knowledge with it.
INDEX_SUFFIX = ".workspace.db"
# Holds the uid:gid the volume belongs to: written when this executor makes
# a volume or hands one over; any other content (none, an older user's, a
# later change of hardening.py's) means "hand it over first".
OWNER_SUFFIX = ".owner"


def index_path(state_dir: str | Path, session_id: str) -> Path:
    return Path(state_dir) / f"{volume_name(session_id)}{INDEX_SUFFIX}"


def remove_index(state_dir: str | Path, session_id: str) -> None:
    """The index and its journal: a journal left behind would be rolled
    back into the next index made under that name."""
    index = index_path(state_dir, session_id)
    for path in (index, index.with_name(f"{index.name}-journal")):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            path.unlink()


def owner_path(state_dir: str | Path, session_id: str) -> Path:
    return Path(state_dir) / f"{volume_name(session_id)}{OWNER_SUFFIX}"


def volume_name(session_id: str) -> str:
    if not SESSION_ID_RE.match(session_id):
        raise InvalidSessionId(f"invalid session id {session_id[:64]!r}")
    return VOLUME_PREFIX + session_id


class PlainVolumes:
    """disk_quota="none": one named volume per session, no size limit."""

    # The engine creates the volume owned by container root; seeding it from
    # the image's home (owned by the sandbox user) on first use makes it the sandbox
    # user's, on rootful and rootless engines alike.
    seed_from_image = True

    def __init__(self, client: docker.DockerClient, state_dir: str = DEFAULT_STATE_DIR,
                 per_user: int = 0) -> None:
        self._client = client
        self.state_dir = Path(state_dir)
        self._per_user = per_user
        self._copies = HostCopies(self.state_dir, volume_name)

    def hold(self, session_id: str, owner: str | None) -> AbstractContextManager[None]:
        """The copy is in use while the block runs (host_copies.py)."""
        return self._copies.hold(session_id, owner)

    def volume_for(self, session_id: str, image: str) -> str:
        """Create on first use; ``image`` hands an older executor's volume
        to the sandbox user. Returns the volume name."""
        name = volume_name(session_id)
        with self._copies.locked():
            with engine_errors(f"cannot look up volume {name}", refused=VolumeError):
                try:
                    exists = bool(self._client.volumes.get(name))
                except docker.errors.NotFound:
                    exists = False
            if not exists:
                _make_room(self, self._copies, session_id, self._per_user, self._client)
                with engine_errors(f"cannot create volume {name}", refused=VolumeError):
                    self._client.volumes.create(name, driver="local",
                                                labels={SESSION_LABEL: session_id})
                _mark_owned(self.state_dir, session_id)
        _ensure_owned(self._client, self.state_dir, session_id, image)
        return name

    def sessions(self) -> list[str]:
        """Sessions that have a volume on this engine."""
        with engine_errors("cannot list volumes", refused=VolumeError):
            volumes = self._client.volumes.list(filters={"label": SESSION_LABEL})
        names = (v.name for v in volumes)
        return [n[len(VOLUME_PREFIX):] for n in names if n.startswith(VOLUME_PREFIX)]

    def attached(self) -> list[str]:
        """Plain volumes hold no loop device."""
        return []

    def release(self, session_id: str) -> None:
        """Nothing host-wide to give back for a plain volume."""

    def remove(self, session_id: str) -> None:
        """Delete this host's copy of the session's files for good
        (VolumeError while it is in use)."""
        with self._copies.locked():
            _remove_unused(self, self._copies, session_id)

    def remove_locked(self, session_id: str) -> None:
        """``remove`` once the copy is known unused, under the host-wide lock."""
        remove_volume(self._client, volume_name(session_id))
        remove_index(self.state_dir, session_id)
        owner_path(self.state_dir, session_id).unlink(missing_ok=True)
        self._copies.forget(session_id)


class LoopVolumes:
    """disk_quota="loop": a fixed-size ext4 image per session."""

    seed_from_image = False  # mkfs.ext4 -E root_owner=<the sandbox user> already

    def __init__(
        self,
        client: docker.DockerClient,
        size_bytes: int,
        state_dir: str = DEFAULT_STATE_DIR,
        per_user: int = 0,
        floor_bytes: int = 0,
    ) -> None:
        self._client = client
        self._size = size_bytes
        self.state_dir = Path(state_dir)
        self._per_user = per_user
        self._floor = floor_bytes
        self._copies = HostCopies(self.state_dir, volume_name)
        self._locked = self._copies.locked
        self._spare = Spare(self.state_dir, size_bytes, self._locked,
                            lambda: check_floor(self.state_dir, floor_bytes))
        # Called with the session id of each image made here, under the
        # host-wide lock, before any container can mount it: a new image is
        # an empty home, and the workspace records that it holds the empty
        # tree (so the session's first command restores nothing).
        self.on_made: Callable[[str], None] = lambda _session_id: None
        self._mountpoints: dict[str, str] = {}  # where the engine mounts each volume
        # While this process holds a copy nothing can release or remove it, so
        # the first answer of volume_for in a hold stands until the last hold
        # ends (a cold command asked three times: its files, the restore,
        # its container): session -> the serial of the unbroken hold, and
        # the volumes answered in it.
        self._holds: dict[str, tuple[int, int]] = {}  # session -> (serial, holds)
        self._ready: dict[str, tuple[int, str]] = {}  # session -> (serial, volume)
        self._serial = 0
        self._holds_lock = threading.Lock()

    def image_path(self, session_id: str) -> Path:
        return self.state_dir / f"{volume_name(session_id)}.ext4"

    @contextlib.contextmanager
    def hold(self, session_id: str, owner: str | None) -> Iterator[None]:
        """The copy is in use while the block runs (host_copies.py)."""
        with self._copies.hold(session_id, owner):
            with self._holds_lock:
                serial, holds = self._holds.get(session_id, (0, 0))
                if not holds:
                    self._serial += 1
                    serial = self._serial
                self._holds[session_id] = (serial, holds + 1)
            try:
                yield
            finally:
                with self._holds_lock:
                    serial, holds = self._holds.pop(session_id)
                    if holds > 1:
                        self._holds[session_id] = (serial, holds - 1)
                    else:
                        self._ready.pop(session_id, None)

    def mountpoint(self, session_id: str) -> str | None:
        """Where the engine mounts the session's volume on this host while
        a container uses it (known once ``volume_for`` has run)."""
        return self._mountpoints.get(session_id)

    def volume_for(self, session_id: str, image: str) -> str:
        """Create on first use; re-attach after a reboot; ``image`` hands an
        older executor's volume to the sandbox user. Returns the volume name."""
        name = volume_name(session_id)
        with self._holds_lock:
            serial = self._holds.get(session_id, (None, 0))[0]
        if self._answered(session_id, serial, name):
            return name
        with self._locked():
            # A cold command's container start waits here while its files'
            # side makes the copy: then it has nothing left to do.
            if self._answered(session_id, serial, name):
                return name
            ext4, made = self._ensure_image(session_id)
            # An image made just now is attached nowhere: no need to ask.
            loop = ((None if made else self._loop_of(ext4))
                    or run_tool("losetup", "--find", "--show", str(ext4)).strip())
            self._ensure_volume(name, session_id, loop)
            if made:  # the sandbox user's from the start
                self._answer(session_id, serial, name)
                return name
        # Outside the host-wide lock: a large home must not hold up other
        # sessions. Two hand-overs of one volume at once just do the same
        # work twice.
        _ensure_owned(self._client, self.state_dir, session_id, image)
        self._answer(session_id, serial, name)
        return name

    def _answered(self, session_id: str, serial: int | None, name: str) -> bool:
        """Whether ``volume_for`` answered ``name`` already in this hold."""
        with self._holds_lock:
            return serial is not None and self._ready.get(session_id) == (serial, name)

    def _answer(self, session_id: str, serial: int | None, name: str) -> None:
        """The answer stands while the hold that ``serial`` names lasts."""
        with self._holds_lock:
            if serial is not None and self._holds.get(session_id, (None, 0))[0] == serial:
                self._ready[session_id] = (serial, name)

    def release(self, session_id: str) -> None:
        """Give back the loop device of an idle session (data stays in the image).

        Loop devices are a host-wide resource; attach on demand, detach when
        idle. Fails with VolumeError if the copy is in use.
        """
        with self._locked(), self._copies.unused(session_id) as unused:
            if not unused:
                raise VolumeError(f"the files of session {session_id} are in use")
            self._release_locked(session_id)

    def _release_locked(self, session_id: str) -> None:
        if blank_copies.still_mounted_by_blank(self._client, self._adopted_marker(session_id)):
            raise VolumeError(f"the files of session {session_id} are in use")
        remove_volume(self._client, volume_name(session_id))
        loop = self._loop_of(self.image_path(session_id))
        if loop:
            run_tool("losetup", "--detach", loop)

    def remove(self, session_id: str) -> None:
        """Delete this host's copy of the session's files for good
        (VolumeError while it is in use)."""
        with self._locked():
            _remove_unused(self, self._copies, session_id)

    def remove_locked(self, session_id: str) -> None:
        """``remove`` once the copy is known unused, under the host-wide lock."""
        self._release_locked(session_id)  # VolumeError while a container uses it
        remove_index(self.state_dir, session_id)
        self.image_path(session_id).unlink(missing_ok=True)
        owner_path(self.state_dir, session_id).unlink(missing_ok=True)
        self._copies.forget(session_id)

    def sessions(self) -> list[str]:
        """Sessions with an image in this executor's state directory."""
        suffix = ".ext4"
        found = self.state_dir.glob(f"{VOLUME_PREFIX}*{suffix}") if self.state_dir.is_dir() else ()
        names = (p.name for p in found)
        ids = (n[len(VOLUME_PREFIX):-len(suffix)] for n in names)
        return sorted(i for i in ids if SESSION_ID_RE.match(i))

    def attached(self) -> list[str]:
        """Sessions of this state directory whose image holds a loop device."""
        out = run_tool("losetup", "--noheadings", "--list", "--output", "BACK-FILE")
        backing = {line.strip() for line in out.splitlines()}
        return [sid for sid in self.sessions() if str(self.image_path(sid).absolute()) in backing]

    # -- blank copies (blank_copies.py) ---------------------------------------

    def blank_copy(self) -> BlankCopy:
        """A blank copy for a session that does not exist yet, attached, with
        a volume of its own (blank_copies.py); first removes those left by
        executors that are gone."""
        name = blank_copies.new_name()
        lock_fd = blank_copies.own(self.state_dir, name)
        image = self.state_dir / f"{name}{blank_copies.IMAGE_SUFFIX}"
        try:
            with self._locked():
                blank_copies.sweep(self._client, self.state_dir)  # a dead executor's, or taken
                check_floor(self.state_dir, self._floor)
                if not self._spare.take(image):
                    make_blank(image, self._size)
                loop = run_tool("losetup", "--find", "--show", str(image)).strip()
                mountpoint = self._create_volume(name, loop, {blank_copies.BLANK_LABEL: "1"})
        except BaseException:
            with self._locked(), contextlib.suppress(VolumeError):
                blank_copies.drop(self._client, name, image)
            BlankCopy(name, image, "", "", lock_fd).let_go()
            raise
        return BlankCopy(name, image, loop, mountpoint, lock_fd)

    def adopt_blank(self, blank: BlankCopy, session_id: str) -> bool:
        """Makes ``blank`` the session's copy, as one made for it now would be
        (empty, the sandbox user's); False when the session has a copy here
        already. The session's volume is on the same loop device; until a
        container starts on it, the copy is mounted where the blank's is."""
        name = volume_name(session_id)
        image = self.image_path(session_id)
        if image.exists():  # most sessions: no need for the host-wide lock
            return False
        with self._locked():
            if image.exists():
                return False
            _make_room(self, self._copies, session_id, self._per_user, self._client)
            blank_copies.mark_adopted(self._adopted_marker(session_id), blank.volume)
            os.rename(blank.image, image)
            blank.let_go()
            self._ensure_volume(name, session_id, blank.loop)
            self._mountpoints[session_id] = blank.mountpoint
            _mark_owned(self.state_dir, session_id)
            self.on_made(session_id)
        return True

    def drop_blank(self, blank: BlankCopy) -> None:
        """Removes a blank copy no session took, once its container is gone."""
        try:
            with self._locked():
                blank_copies.drop(self._client, blank.volume, blank.image)
        finally:
            blank.let_go()

    def sweep_blanks(self) -> None:
        """Removes what blank copies left that nobody uses (blank_copies.sweep)."""
        with self._locked():
            blank_copies.sweep(self._client, self.state_dir)

    def _adopted_marker(self, session_id: str) -> Path:
        return self.state_dir / f"{volume_name(session_id)}{blank_copies.ADOPTED_SUFFIX}"

    # -- helpers -----------------------------------------------------------

    def _ensure_image(self, session_id: str) -> tuple[Path, bool]:
        """The session's image, and whether it was made just now."""
        image = self.image_path(session_id)
        if image.exists():
            return image, False
        check_floor(self.state_dir, self._floor)
        _make_room(self, self._copies, session_id, self._per_user, self._client)
        if not self._spare.take(image):
            make_blank(image, self._size)
        _mark_owned(self.state_dir, session_id)
        self.on_made(session_id)
        return image, True

    @staticmethod
    def _loop_of(image: Path) -> str | None:
        loops = loops_of(image)
        return loops[0] if loops else None

    def _ensure_volume(self, name: str, session_id: str, loop: str) -> None:
        with engine_errors(f"cannot prepare volume {name} on {loop}", refused=VolumeError):
            try:
                volume = self._client.volumes.get(name)
            except docker.errors.NotFound:
                volume = None
            if volume is not None:
                if (volume.attrs.get("Options") or {}).get("device") == loop:
                    self._mountpoints[session_id] = str(volume.attrs.get("Mountpoint"))
                    return
                # After a reboot the loop number differs, and /dev/loopN may
                # now back ANOTHER session's image: a volume pointing at it
                # must never be mounted. Volume options are immutable, so
                # replace the volume; the data lives in the image file.
                volume.remove()
            self._mountpoints[session_id] = self._create_volume(name, loop,
                                                                {SESSION_LABEL: session_id})

    def _create_volume(self, name: str, loop: str, labels: dict[str, str]) -> str:
        """The engine's volume ``name`` on ``loop``; returns its mountpoint."""
        with engine_errors(f"cannot create volume {name} on {loop}", refused=VolumeError):
            volume = self._client.volumes.create(
                name,
                driver="local",
                # discard: a file deleted in the home gives its blocks back
                # to the host (the image is sparse, blank_images.py).
                driver_opts={"type": "ext4", "device": loop, "o": "nosuid,nodev,discard"},
                labels=labels,
            )
        return str(volume.attrs.get("Mountpoint"))


class _Copies(Protocol):
    def sessions(self) -> list[str]: ...

    def remove_locked(self, session_id: str) -> None: ...


def _remove_unused(volumes: _Copies, copies: HostCopies, session_id: str) -> None:
    with copies.unused(session_id) as unused:
        if not unused:
            raise VolumeError(f"the files of session {session_id} are in use")
        volumes.remove_locked(session_id)


def _make_room(volumes: _Copies, copies: HostCopies, session_id: str, per_user: int,
               client: docker.DockerClient) -> None:
    """Under the host-wide lock, before a copy of ``session_id`` is made:
    removes its owner's least recently used copies that nobody uses until
    the new one is within ``per_user`` (0: no bound). Safe: a counted copy's
    files are in the database. Copies in use are never taken and never block
    the new one: how many a user has in use is bounded by their running
    quota, the executors' concurrency and the warm places per user, so the
    bound is on the copies a host keeps idle."""
    owner = copies.owner_of(session_id)
    if not per_user or owner is None:
        return
    others = copies.least_recent_first(owner, [s for s in volumes.sessions() if s != session_id])
    excess = len(others) + 1 - per_user
    if excess <= 0:
        return
    # A copy a container holds (a warm one waits on it) cannot go: the
    # engine would refuse, one call each.
    held = _held_by_containers(client)
    for other in others:
        if excess <= 0:
            return
        if other in held:
            continue
        with copies.unused(other) as unused:
            if not unused:
                continue
            try:
                volumes.remove_locked(other)
            except VolumeError as exc:  # a container holds it: try the next
                log.info("session_id=%s: copy not evicted: %s", other, exc)
                continue
        log.info("session_id=%s: copy evicted for session_id=%s of the same user "
                 "(at most %d a user on this host)", other, session_id, per_user)
        excess -= 1


def _held_by_containers(client: docker.DockerClient) -> set[str]:
    """Sessions whose volume a container of the engine (running or not) holds."""
    with engine_errors("cannot list containers", refused=VolumeError):
        listed = client.api.containers(all=True, filters={"label": SESSION_LABEL})
    return {str((c.get("Labels") or {}).get(SESSION_LABEL)) for c in listed}


def _mark_owned(state_dir: Path, session_id: str) -> None:
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    owner_path(state_dir, session_id).write_text(SANDBOX_USER)


def _ensure_owned(client: docker.DockerClient, state_dir: Path, session_id: str,
                  image: str) -> None:
    try:
        if owner_path(state_dir, session_id).read_text() == SANDBOX_USER:
            return
    except FileNotFoundError:
        pass  # made by an older executor (or its marker lost): hand it over
    hand_over(client, image, volume_name(session_id), session_id)
    _mark_owned(state_dir, session_id)

