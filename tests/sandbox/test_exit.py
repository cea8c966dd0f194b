"""When a command's container exits: after the executor is done with it.
Its supervisor, once it said all it will, waits for the end of its stdin
(the executor stores the command's completion first, so the engine's work
of tearing the container down does not run beside it); removal ends it,
and so does closing our half of the attach stream."""

from __future__ import annotations

import socket
import time

from tests.support import wait_for


def test_a_command_s_container_waits_until_it_is_removed(run, sandbox, docker_client) -> None:
    ran = run("echo hi", keep=True)
    assert ran.output == "hi\n" and ran.result.exit_code == 0
    time.sleep(1)  # an exit that was coming would have come
    container = docker_client.containers.get(ran.result.container_id)
    assert container.status == "running"  # its command over, its supervisor waiting
    sandbox.remove_container(ran.result.container_id)
    wait_for("the container gone", lambda: not docker_client.containers.list(
        all=True, sparse=True, filters={"id": ran.result.container_id}))


def test_closing_our_half_of_the_attach_stream_ends_the_supervisor(sandbox, image, session_id,
                                                                   docker_client) -> None:
    started = sandbox.warm(session_id, "pgtest-exit", image)
    try:
        started.raw.shutdown(socket.SHUT_WR)  # what a run does when it needs the exit
        result = docker_client.api.wait(started.container_id, timeout=60)
        assert result["StatusCode"] != 0  # it ended for want of a command
    finally:
        started.close()
        sandbox.remove_container(started.container_id)


def test_removal_lets_an_ended_command_s_container_exit_instead_of_killing_it(
        run, sandbox, docker_client) -> None:
    since = time.time() - 1
    ran = run("echo hi", keep=True)
    sandbox.let_exit(ran.result.container_id)
    sandbox.remove_container(ran.result.container_id)
    events = docker_client.events(since=since, until=time.time() + 1, decode=True,
                                  filters={"container": ran.result.container_id})
    actions = {event["Action"]: event["Actor"]["Attributes"] for event in events}
    assert "destroy" in actions
    assert "kill" not in actions  # a kill costs the engine a run of the runtime
    assert actions["die"]["exitCode"] == "0"
