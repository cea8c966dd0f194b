"""The warm pool against the real engine, when a command comes for a session
whose warm start has not finished: one being started is waited for and
used (no second container beside it), one still queued is never made; a
session holds up to its part, and a taken one is replaced once its command
ended, or at once when the session holds no other or it could not be used.

The sandbox here holds each warm start at its beginning until the test lets
it go, so the command provably arrives while the start is in progress; the
start itself is the real one."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import docker
import pytest

from executor.sandbox import RunRequest, Sandbox, Started
from executor.sandbox.spec import LABEL_SESSION
from executor.sandbox.volumes import LoopVolumes
from executor.worker.warm import WarmPool
from tests.sandbox.conftest import PREFIX, SHELL_ROOT
from tests.support import wait_for

HANG = 120  # seconds: only proves that something did not hang


class HeldStarts(Sandbox):
    """A real sandbox whose warm starts wait at their beginning for ``go``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entered: dict[str, threading.Event] = {}
        self.go: dict[str, threading.Event] = {}

    def hold(self, session_id: str) -> None:
        self.entered[session_id] = threading.Event()
        self.go[session_id] = threading.Event()

    def warm(self, session_id: str, worker_id: str, image: str,
             runtime: str | None = None) -> Started:
        if session_id in self.go:
            self.entered[session_id].set()
            self.go[session_id].wait(HANG)
        return super().warm(session_id, worker_id, image, runtime)


@pytest.fixture
def held(make_sandbox: Callable[..., Sandbox]) -> HeldStarts:
    made = make_sandbox()  # its state directory is the fixtures' to clean up
    quota = "loop" if isinstance(made.volumes, LoopVolumes) else "none"
    return HeldStarts(made.limits, shell_root=SHELL_ROOT, disk_quota=quota,
                      volume_dir=str(made.volumes.state_dir), scope=PREFIX)


@pytest.fixture
def pool(held: HeldStarts) -> Iterator[WarmPool]:
    warm = WarmPool(held, PREFIX, max_count=4, idle_s=300)
    yield warm
    for go in held.go.values():
        go.set()
    warm.close()


def containers_of(docker_client: docker.DockerClient, session_id: str) -> list[str]:
    found = docker_client.containers.list(
        all=True, sparse=True, filters={"label": f"{LABEL_SESSION}={session_id}"})
    return [c.id for c in found]


def test_a_command_that_comes_while_its_warm_start_runs_waits_for_it_and_runs_in_it_once(
        pool: WarmPool, held: HeldStarts, image: str, session_id: str,
        docker_client: docker.DockerClient) -> None:
    held.hold(session_id)
    pool.prepare(session_id, image)
    assert held.entered[session_id].wait(HANG)  # the start is under way, nothing held yet
    taken: list[Started | None] = []
    taker = threading.Thread(target=lambda: taken.append(pool.take(session_id, image, "runc")))
    taker.start()
    taker.join(0.5)
    assert taker.is_alive()  # it waits for the start instead of missing it
    held.go[session_id].set()
    taker.join(HANG)
    [started] = taken
    assert started is not None and started.session_id == session_id
    assert containers_of(docker_client, session_id) == [started.container_id]

    output: list[str] = []
    req = RunRequest(command_id=1, session_id=session_id, worker_id=PREFIX,
                     command="echo ran; pwd", cwd=SHELL_ROOT, env={}, image=image)
    result = held.run(req, lambda _cid: None, output.append, threading.Event(), warm=started)
    pool.finished(started)
    assert (result.exit_code, "".join(output)) == (0, f"ran\n{SHELL_ROOT}\n")
    assert result.container_id == started.container_id
    held.remove_container(result.container_id)
    # Used once and never kept: its place was filled from the moment it was
    # taken, by another container.
    again = pool.take(session_id, image, "runc")
    assert again is not None and again.container_id != started.container_id
    pool.finished(again)
    held.discard(again)
    pool.close()
    assert containers_of(docker_client, session_id) == []


def test_a_warm_start_still_queued_when_its_command_comes_is_never_made(
        pool: WarmPool, held: HeldStarts, image: str, docker_client: docker.DockerClient) -> None:
    busy, queued, after = (f"{PREFIX}-{name}" for name in ("busy", "queued", "after"))
    held.hold(busy)
    pool.prepare(busy, image)
    assert held.entered[busy].wait(HANG)  # the one starter is busy: the next waits in line
    pool.prepare(queued, image)
    assert pool.take(queued, image, "runc") is None  # not waited for: its command starts its own
    pool.prepare(after, image)
    held.go[busy].set()
    # One starter takes them in order: once the last is held, the queued one's turn is over.
    wait_for("the starts after it", lambda: pool.count() == 2)
    assert containers_of(docker_client, queued) == []
    assert len(containers_of(docker_client, busy)) == len(containers_of(docker_client, after)) == 1


def test_a_taken_one_is_replaced_once_its_command_ended_or_at_once_when_none_is_left(
        held: HeldStarts, image: str, session_id: str,
        docker_client: docker.DockerClient) -> None:
    pool = WarmPool(held, PREFIX, max_count=6, idle_s=300, per_session=2)
    marker = f"{PREFIX}-marker"
    taken: list[Started | None] = []
    try:
        pool.prepare(session_id, image)
        wait_for("the session's two warm containers", lambda: pool.count() == 2, HANG)
        held.hold(session_id)  # from now on a start of the session waits for the test
        taken.append(pool.take(session_id, image, "runc"))
        # The second is still held: the first's place is filled once its
        # command ended, not beside it. A start asked for after the take (the
        # one starter takes them in order) is made, so none waits before it.
        pool.prepare(marker, image)
        wait_for("the start asked for after the take", lambda: pool.count() >= 2, HANG)
        assert not held.entered[session_id].is_set()
        pool.ended(session_id)  # however its command ended
        assert held.entered[session_id].wait(HANG)
        held.go[session_id].set()
        wait_for("the session's two held again", lambda: pool.count() == 4, HANG)
        held.hold(session_id)
        taken.append(pool.take(session_id, image, "runc"))  # another is held: put off
        # Typed right after: the last one is ready, and with none left its
        # place is being filled at once.
        taken.append(pool.take(session_id, image, "runc"))
        assert held.entered[session_id].wait(HANG)
        assert None not in taken and len({started.container_id for started in taken}) == 3
    finally:
        for go in held.go.values():
            go.set()
        for started in taken:
            if started is not None:
                pool.finished(started)
                held.discard(started)
        pool.close()
    assert containers_of(docker_client, session_id) == containers_of(docker_client, marker) == []


def test_a_taken_container_that_cannot_run_the_command_is_replaced_at_once(
        held: HeldStarts, image: str, session_id: str,
        docker_client: docker.DockerClient) -> None:
    pool = WarmPool(held, PREFIX, max_count=4, idle_s=300, per_session=2)
    try:
        pool.prepare(session_id, image)
        wait_for("the session's two warm containers", lambda: pool.count() == 2, HANG)
        held.hold(session_id)
        # A command on an image promoted since: the one taken is of the image
        # before, and so is the one still held, so the next start is not
        # left to the command's completion.
        assert pool.take(session_id, f"{image}-promoted", "runc") is None
        assert held.entered[session_id].wait(HANG)
    finally:
        for go in held.go.values():
            go.set()
        pool.close()
    assert containers_of(docker_client, session_id) == []


def test_a_user_part_counts_containers_not_sessions(
        held: HeldStarts, image: str, docker_client: docker.DockerClient) -> None:
    pool = WarmPool(held, PREFIX, max_count=8, idle_s=300, per_user=3, per_session=2)
    sessions = [f"{PREFIX}-part-{n}" for n in range(3)]
    try:
        for session in sessions:
            pool.prepare(session, image, user_id="alice")
        wait_for("alice's part held", lambda: pool.count() == 3, HANG)
        pool.prepare(f"{PREFIX}-part-bob", image, user_id="bob")
        wait_for("bob's next to it", lambda: pool.count() == 5, HANG)
        assert sum(len(containers_of(docker_client, s)) for s in sessions) == 3
    finally:
        pool.close()


def test_archiving_a_session_while_its_warm_start_runs_leaves_no_container_and_starts_none(
        held: HeldStarts, image: str, session_id: str,
        docker_client: docker.DockerClient) -> None:
    pool = WarmPool(held, PREFIX, max_count=4, idle_s=300, per_session=2)
    try:
        held.hold(session_id)
        pool.prepare(session_id, image)
        assert held.entered[session_id].wait(HANG)
        dropping = threading.Thread(target=pool.drop_session, args=(session_id,))
        dropping.start()
        dropping.join(0.5)
        assert dropping.is_alive()  # it waits for the start under way ...
        held.go[session_id].set()
        dropping.join(HANG)
        # ... whose container goes at once, and none follows it (with two
        # per session, one would), so the session's volume is free now.
        assert containers_of(docker_client, session_id) == []
        pool.prepare(session_id, image)  # a late completion's request
        assert pool.count() == 0 and containers_of(docker_client, session_id) == []
        # Unarchived, its command is taken here again, and its completion
        # asks for its next containers: they start.
        assert pool.take(session_id, image, "runc") is None
        pool.prepare(session_id, image)
        wait_for("its warm containers again", lambda: pool.count() == 2, HANG)
    finally:
        pool.close()
    assert containers_of(docker_client, session_id) == []
