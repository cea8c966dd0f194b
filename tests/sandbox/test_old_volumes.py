"""A volume an older executor made (its sandbox user was 1000:1000) works
on the next command: handed to the sandbox user once, before any tenant
process, files intact, no link followed, loop and plain volumes alike."""

from __future__ import annotations

import contextlib
import datetime
import os
import time

import docker.errors
import pytest

from executor.sandbox.ownership import LABEL_HAND_OVER
from tests.conftest import require
from tests.old_volume import CHECK, FILES, checked, host_target, make_old, untouched


@pytest.fixture(params=["loop", "none"])
def box(request, make_sandbox):
    if request.param == "loop":
        require(os.geteuid() == 0, "root (loop-backed volumes need losetup and mkfs)")
    return make_sandbox(disk_quota=request.param)


def hand_overs(docker_client, session_id: str, since: datetime.datetime) -> int:
    """Hand-over containers created for the session since ``since``, as the
    engine's event log tells (they are removed once done)."""
    events = docker_client.events(
        since=since, until=datetime.datetime.now() + datetime.timedelta(seconds=1), decode=True,
        filters={"type": "container", "event": "create",
                 "label": f"{LABEL_HAND_OVER}={session_id}"})
    return sum(1 for _ in events)


def test_an_older_executors_volume_is_handed_over_once_before_its_command(
        box, run, image, session_id, docker_client) -> None:
    since = datetime.datetime.now() - datetime.timedelta(seconds=1)
    with host_target("/var/tmp") as target:
        make_old(docker_client, box.volumes, session_id, image,
                 FILES.format(host_target=target))
        ran = run(CHECK, box=box)
        assert (ran.result.exit_code, ran.output) == (0, checked(target))
        assert untouched(target)
    assert run("cat new; touch newer", box=box).output == "new\n"
    assert hand_overs(docker_client, session_id, since) == 1


def test_a_volume_made_by_this_executor_is_never_handed_over(
        box, run, session_id, docker_client) -> None:
    since = datetime.datetime.now() - datetime.timedelta(seconds=1)
    assert run("echo mine > f; stat -c %u:%g . f", box=box).output == "65000:65000\n" * 2
    box.volumes.release(session_id)  # loop: re-attached by the next command
    assert run("cat f", box=box).output == "mine\n"
    assert hand_overs(docker_client, session_id, since) == 0


def test_a_hand_over_whose_executor_died_is_reaped(
        sandbox, image, session_id, docker_client) -> None:
    # What an executor killed during a hand-over leaves: a labelled container
    # that still runs and keeps the volume in use.
    left = docker_client.containers.run(
        image, entrypoint=["/bin/sleep", "300"], labels={LABEL_HAND_OVER: session_id},
        network_disabled=True, detach=True)
    try:
        # Young, it may be a live executor's: kept.
        assert left.id not in sandbox.reap_hand_overs()
        assert docker_client.containers.list(filters={"id": left.id})
        # Old enough (here: any age), it is nobody's: removed.
        deadline = time.monotonic() + 30
        while left.id not in sandbox.reap_hand_overs(older_than_s=0):
            assert time.monotonic() < deadline, "the hand-over container was never reaped"
            time.sleep(0.2)  # the engine's creation time counts whole seconds
        assert not docker_client.containers.list(all=True, filters={"id": left.id})
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            left.remove(force=True)
