"""Blank copies (executor/sandbox/blank_copies.py): a container started on
a blank copy becomes a new session's, with the copy; a copy a session has
already is never replaced; what a dead executor left is swept, what a live
one owns is not; and a copy born blank is never released while the blank
volume may still mount it."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from executor.sandbox import Blank, RunRequest, Sandbox, VolumeError
from tests.conftest import require
from tests.sandbox.conftest import PREFIX, SHELL_ROOT


@pytest.fixture
def box(make_sandbox: Any) -> Sandbox:
    require(os.geteuid() == 0, "root (loop-backed volumes need losetup and mkfs)")
    return make_sandbox()


def volume_exists(docker_client: Any, name: str) -> bool:
    try:
        docker_client.volumes.get(name)
        return True
    except docker.errors.NotFound:
        return False


def loops_of(image: Path) -> list[str]:
    return subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                          capture_output=True, text=True, check=True).stdout.split()


def request(session_id: str, command: str, image: str) -> RunRequest:
    return RunRequest(command_id=1, session_id=session_id, worker_id=PREFIX, command=command,
                      cwd=SHELL_ROOT, env={}, image=image)


def run_in(box: Sandbox, started: Any, session_id: str, command: str, image: str) -> str:
    out: list[str] = []
    result = box.run(request(session_id, command, image), lambda _cid: None, out.append,
                     threading.Event(), warm=started)
    box.remove_container(result.container_id)
    assert result.exit_code == 0, out
    return "".join(out)


def test_a_new_session_takes_the_blank_container_and_its_copy(box, image, session_id,
                                                               docker_client) -> None:
    made: list[str] = []
    box.volumes.on_made = made.append
    blank = box.blank(PREFIX, image)
    started = box.adopt_blank(blank, session_id)
    assert started is not None and started.container_id == blank.started.container_id
    assert started.session_id == session_id
    assert made == [session_id]  # its index says: the empty tree
    image_path = box.volumes.image_path(session_id)  # type: ignore[union-attr]
    assert not blank.copy.image.exists() and loops_of(image_path) == [blank.copy.loop]

    assert run_in(box, started, session_id, "ls -A; echo one > f", image) == ""
    # The session's own volume is the same file system.
    later = box.start(request(session_id, "", image))
    assert run_in(box, later, session_id, "cat f", image) == "one\n"
    box.volumes.sweep_blanks()  # type: ignore[union-attr]
    assert not volume_exists(docker_client, blank.copy.volume)  # no container mounts it now
    box.volumes.remove(session_id)


def test_a_session_that_has_a_copy_here_keeps_it(box, image, run, session_id) -> None:
    run("echo mine > f", box=box)
    blank = box.blank(PREFIX, image)
    try:
        assert box.adopt_blank(blank, session_id) is None
        assert blank.copy.image.exists()
        assert run("cat f", box=box).output == "mine\n"
    finally:
        box.discard_blank(blank)
    assert not blank.copy.image.exists() and not loops_of(blank.copy.image)


def test_a_copy_born_blank_is_not_released_while_the_blank_volume_mounts_it(
        box, image, session_id, docker_client) -> None:
    blank = box.blank(PREFIX, image)
    started = box.adopt_blank(blank, session_id)
    assert started is not None
    with pytest.raises(VolumeError, match="in use"):
        box.volumes.release(session_id)
    box.discard(started)  # its container gone, the blank volume mounts nothing
    box.volumes.sweep_blanks()  # type: ignore[union-attr]
    assert not volume_exists(docker_client, blank.copy.volume)
    box.volumes.release(session_id)
    box.volumes.remove(session_id)


def test_a_dead_executor_s_blank_copy_is_swept_and_a_live_one_s_is_not(
        box, image, docker_client) -> None:
    live = box.volumes.blank_copy()  # type: ignore[union-attr]
    dead = box.volumes.blank_copy()  # type: ignore[union-attr]
    os.close(dead.lock_fd)  # as its process's end would
    box.volumes.sweep_blanks()  # type: ignore[union-attr]
    assert not dead.image.exists() and not volume_exists(docker_client, dead.volume)
    assert not loops_of(dead.image)
    assert live.image.exists() and volume_exists(docker_client, live.volume)
    box.volumes.drop_blank(live)  # type: ignore[union-attr]
    assert not live.image.exists() and not volume_exists(docker_client, live.volume)


def test_a_blank_container_is_as_locked_down_as_any(box, image, docker_client) -> None:
    blank: Blank = box.blank(PREFIX, image)
    try:
        attrs = docker_client.api.inspect_container(blank.started.container_id)
        host = attrs["HostConfig"]
        assert host["ReadonlyRootfs"] and host["NetworkMode"] == "none"
        assert host["CapDrop"] == ["ALL"]
        assert [m["Name"] for m in attrs["Mounts"] if m["Type"] == "volume"] == [
            blank.copy.volume]
    finally:
        box.discard_blank(blank)
