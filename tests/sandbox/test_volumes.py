"""Session volumes: the quota holds, data persists, stale loop devices are
never mounted, and leftover containers are reaped."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from executor.sandbox import VolumeError
from executor.sandbox.blank_images import SPARE_NAME
from executor.sandbox.volumes import volume_name
from tests.conftest import require
from tests.sandbox.conftest import PREFIX

QUOTA = 64 * 1024 * 1024


@pytest.fixture
def as_root() -> None:
    require(os.geteuid() == 0, "root (loop-backed volumes need losetup and mkfs)")


needs_root = pytest.mark.usefixtures("as_root")


@needs_root
def test_disk_fill_stops_at_the_quota(make_sandbox, run, session_id) -> None:
    box = make_sandbox(disk_quota_bytes=QUOTA, fsize_bytes=QUOTA)
    # quota + 64 MiB in total, in files below the fsize limit; bounded.
    ran = run(
        "for i in 1 2 3 4; do dd if=/dev/zero of=f$i bs=1M count=32 status=none || break; done;"
        " sync; du -sk --apparent-size . | cut -f1",
        box=box,
    )
    assert "No space left on device" in ran.output
    written_kib = int(ran.output.split()[-1])
    assert 0 < written_kib * 1024 <= QUOTA
    image = box.volumes.image_path(session_id)  # type: ignore[union-attr]
    st = os.stat(image)
    assert st.st_size == QUOTA
    assert st.st_blocks * 512 <= QUOTA


@needs_root
def test_files_persist_and_survive_loop_reattach(run, sandbox, session_id) -> None:
    assert run("echo kept > data").result.exit_code == 0
    sandbox.volumes.release(session_id)  # idle: loop detached, volume removed
    assert run("cat data").output == "kept\n"


@needs_root
def test_a_stale_loop_device_is_never_mounted(run, sandbox, session_id) -> None:
    """After a reboot /dev/loopN may back another file; the volume must follow
    the session's own image, not the old device number."""
    assert run("echo mine > data").result.exit_code == 0
    image = sandbox.volumes.image_path(session_id)
    old_loop = subprocess.run(
        ["losetup", "-n", "-O", "NAME", "-j", str(image)], capture_output=True, text=True,
        check=True
    ).stdout.split()[0]
    subprocess.run(["losetup", "-d", old_loop], check=True)
    with tempfile.NamedTemporaryFile(dir="/var/tmp") as other:
        other.truncate(QUOTA)
        subprocess.run(["mkfs.ext4", "-q", "-F", other.name], check=True)
        # Take the old number for a foreign filesystem, as a reboot might.
        subprocess.run(["losetup", old_loop, other.name], check=True)
        try:
            ran = run("cat data")
        finally:
            subprocess.run(["losetup", "-d", old_loop], check=False)
    assert ran.output == "mine\n"


def test_invalid_session_ids_are_refused(sandbox, image) -> None:
    from executor.sandbox import InvalidSessionId

    for bad in ("../etc", "a/b", ".hidden", "", "x" * 200):
        with pytest.raises(InvalidSessionId):
            sandbox.volumes.volume_for(bad, image)


def test_reap_removes_only_rejected_containers(run, sandbox, docker_client) -> None:
    doomed = run("true", keep=True, command_id=8_999_000_001)
    kept = run("true", keep=True)
    removed = sandbox.reap(lambda command_id: command_id != 8_999_000_001)
    assert removed == [doomed.result.container_id]
    names = {c.id for c in docker_client.containers.list(all=True, sparse=True)}
    assert doomed.result.container_id not in names
    assert kept.result.container_id in names


def wait_for_spare(path: Path, not_inode: int | None = None) -> int:
    """The inode of the spare image once one (not ``not_inode``) is there."""
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(FileNotFoundError):
            if (inode := path.stat().st_ino) != not_inode:
                return inode
        assert time.monotonic() < deadline, "no spare image was made"
        time.sleep(0.05)


@needs_root
def test_a_new_session_takes_the_spare_blank_image_and_another_is_made(
        make_sandbox, run, session_id) -> None:
    box = make_sandbox(disk_quota="loop", disk_quota_bytes=QUOTA)
    spare = box.volumes.state_dir / SPARE_NAME
    # The first new session finds no spare: its image is made on the spot.
    assert run("echo first > f", box=box, session=f"{session_id}-a").result.exit_code == 0
    inode = wait_for_spare(spare)
    ran = run("ls -A; stat -c %u:%g .; echo second > f; cat f", box=box)
    # The spare became this session's home: blank, the sandbox user's, writable.
    assert ran.output == "65000:65000\nsecond\n"
    image = box.volumes.image_path(session_id)
    assert (image.stat().st_ino, image.stat().st_size) == (inode, QUOTA)
    wait_for_spare(spare, not_inode=inode)  # and a new spare follows


@needs_root
def test_a_spare_of_another_size_is_never_used(make_sandbox, run, session_id) -> None:
    box = make_sandbox(disk_quota="loop", disk_quota_bytes=QUOTA)
    spare = box.volumes.state_dir / SPARE_NAME
    spare.parent.mkdir(parents=True, exist_ok=True)
    with open(spare, "wb") as wrong:  # as a quota change leaves it
        wrong.truncate(QUOTA * 2)
    inode = spare.stat().st_ino
    ran = run("ls -A; df -k --output=size . | tail -1", box=box)
    image = box.volumes.image_path(session_id)
    assert image.stat().st_ino != inode and image.stat().st_size == QUOTA
    assert int(ran.output) * 1024 <= QUOTA  # blank (ls -A printed nothing), of the quota's size
    deadline = time.monotonic() + 60
    while spare.stat().st_size != QUOTA:  # replaced by one of the quota's size
        assert time.monotonic() < deadline, "the wrong-size spare was not replaced"
        time.sleep(0.05)


@needs_root
def test_a_copy_in_use_is_never_evicted_nor_removed(make_sandbox, run, session_id,
                                                    image) -> None:
    box = make_sandbox(disk_quota="loop", disk_quota_bytes=QUOTA, copies_per_user=1)
    volumes = box.volumes
    first, second, third, other = (f"{session_id}-{n}" for n in ("a", "b", "c", "d"))
    with volumes.hold(first, "user-1"):
        assert run("echo kept > f", box=box, session=first).result.exit_code == 0
        # In use (between its restore and its container, say): the user's
        # next copy is made beside it, never by taking this one.
        with volumes.hold(second, "user-1"):
            assert run("true", box=box, session=second).result.exit_code == 0
        with pytest.raises(VolumeError, match="in use"):
            volumes.remove(first)
    assert volumes.image_path(first).exists() and volumes.image_path(second).exists()
    with volumes.hold(third, "user-1"):  # both idle now: they go, least recent first
        assert run("true", box=box, session=third).result.exit_code == 0
    assert not volumes.image_path(first).exists() and not volumes.image_path(second).exists()
    with volumes.hold(other, "user-2"):  # another user's copies are not counted
        assert run("true", box=box, session=other).result.exit_code == 0
    assert volumes.image_path(third).exists() and volumes.image_path(other).exists()


@needs_root
def test_a_copy_a_container_holds_is_passed_over_without_asking_the_engine(
        make_sandbox, run, session_id, image, caplog) -> None:
    box = make_sandbox(disk_quota="loop", disk_quota_bytes=QUOTA, copies_per_user=1)
    volumes = box.volumes
    first, second, third = (f"{session_id}-{n}" for n in ("a", "b", "c"))
    with volumes.hold(first, "user-1"):
        assert run("true", box=box, session=first).result.exit_code == 0
    waiting = box.warm(first, PREFIX, image)  # holds the first copy's volume
    try:
        with caplog.at_level("INFO", logger="executor.sandbox.volumes"), \
                volumes.hold(second, "user-1"):
            assert run("true", box=box, session=second).result.exit_code == 0
        # Kept, and the engine was never asked to remove its volume.
        assert volumes.image_path(first).exists() and box.usable(waiting)
        assert not [r for r in caplog.records if "not evicted" in r.getMessage()]
    finally:
        box.discard(waiting)
    with volumes.hold(third, "user-1"):  # nothing holds them now: they go
        assert run("true", box=box, session=third).result.exit_code == 0
    assert not volumes.image_path(first).exists() and not volumes.image_path(second).exists()


@needs_root
def test_a_held_copy_is_looked_up_once_a_hold_and_again_after_it(
        make_sandbox, run, session_id, image, docker_client) -> None:
    """Nothing releases a held copy, so one lookup stands for the hold (a
    cold command needs its volume for its files, a restore and its
    container); a hold that ended proves nothing about the next."""
    box = make_sandbox(disk_quota="loop", disk_quota_bytes=QUOTA)
    volumes = box.volumes

    def engine_has(name: str) -> bool:
        return bool(docker_client.volumes.list(filters={"name": name}))

    with volumes.hold(session_id, None):
        name = volumes.volume_for(session_id, image)
        docker_client.volumes.get(name).remove()  # behind the executor's back
        assert volumes.volume_for(session_id, image) == name and not engine_has(name)
    with volumes.hold(session_id, None):
        assert volumes.volume_for(session_id, image) == name and engine_has(name)
        assert run("echo still > f && cat f", box=box).output == "still\n"
    assert volumes.volume_for(session_id, image) == name  # outside a hold: looked up


@needs_root
def test_a_copy_made_while_its_container_waited_for_it_is_not_looked_up_again(
        make_sandbox, session_id, image, tmp_path, monkeypatch) -> None:
    """A cold command's files and its container ask for the copy at once;
    the one that waited while the other made it has nothing left to do
    (before, it asked losetup and the engine again, on the start's path)."""
    calls = tmp_path / "losetup-calls"
    shim = tmp_path / "bin" / "losetup"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {shutil.which("losetup")} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}:{os.environ['PATH']}")
    volumes = make_sandbox(disk_quota="loop", disk_quota_bytes=QUOTA).volumes
    volumes.state_dir.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    with volumes.hold(session_id, None):
        # Another executor of the host holds the host-wide lock: both wait.
        with open(volumes.state_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            askers = [threading.Thread(target=lambda: names.append(
                volumes.volume_for(session_id, image))) for _ in range(2)]
            for asker in askers:
                asker.start()
            time.sleep(0.5)  # both at the lock (if not, the second finds the answer anyway)
        for asker in askers:
            asker.join(60)
        assert names == [volume_name(session_id)] * 2
    assert calls.read_text().splitlines() == [
        f"--find --show {volumes.image_path(session_id)}"]
