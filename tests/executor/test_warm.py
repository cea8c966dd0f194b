"""Warm starts against the real daemon and engine: a session's next command
runs in a container started before it arrived, used once; the pool keeps
its bounds; a warm container that died, or belongs to another session, is
never used; and none outlives the executor."""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import psycopg2
import pytest

from tests.executor.conftest import Shell
from tests.fixtures_stack import Daemon, free_port
from tests.support import one, wait_for

HANG = 120  # seconds: only proves that something did not hang


def warm_containers(docker_client: Any, daemon: Daemon, session_id: str | None = None
                    ) -> list[Any]:
    labels = ["pg-shell.warm=1", f"pg-shell.worker-id={daemon.env['PG_SHELL_WORKER_ID']}"]
    if session_id:
        labels.append(f"pg-shell.session-id={session_id}")
    return docker_client.containers.list(all=True, sparse=True, filters={"label": labels})


def container_of(shell: Shell, command_id: int) -> str:
    return str(shell.command(command_id)["container_id"])


def metric(daemon: Daemon, sample: str) -> float:
    """The sum of the samples named ``sample`` (a name, or name{labels})."""
    url = f"http://127.0.0.1:{daemon.env['PG_SHELL_METRICS_PORT']}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    pattern = re.escape(sample) + (r"(?:\{[^}]*\})?" if "{" not in sample else "")
    return sum(float(v) for v in re.findall(rf"^{pattern} (\S+)$", text, re.M))


def warm_one(docker_client: Any, daemon: Daemon, shell: Shell, held: int = 1) -> Any:
    """The session's warm container, once the pool holds ``held`` (its own among them)."""
    wait_for("warm containers held", lambda: metric(daemon, "pg_shell_warm_containers") == held)
    [container] = warm_containers(docker_client, daemon, shell.session_id)
    return container


def with_metrics(make_daemon: Callable[..., Daemon], **overrides: str) -> Daemon:
    """A daemon whose sessions hold one warm container each (unless
    overridden), so that each test can name the one its command takes."""
    settings = {"PG_SHELL_WARM_PER_SESSION": "1", **overrides}
    return make_daemon(PG_SHELL_METRICS_PORT=str(free_port()), **settings).start()


def test_the_next_command_of_a_session_runs_in_the_container_started_for_it(
        make_daemon: Callable[..., Daemon], shell: Shell, docker_client: Any) -> None:
    daemon = with_metrics(make_daemon)
    first = shell.run("echo one > f; mkdir d; cd d; export A=1")
    assert first["status"] == "done"
    warm = warm_one(docker_client, daemon, shell)

    second = shell.submit("cat ~/f; pwd; echo $A")
    row = shell.wait(second)
    assert (row["status"], row["output"]) == ("done", "one\n/home/sandbox/d\n1\n")
    assert container_of(shell, second) == warm.id  # handed over, not started for it
    # Used once: the next command gets another, new, warm container.
    new_warm = warm_one(docker_client, daemon, shell)
    third = shell.run("true")
    assert container_of(shell, third["id"]) == new_warm.id != warm.id
    assert metric(daemon, "pg_shell_warm_hits_total") == 2


def test_commands_typed_back_to_back_each_find_a_container_started_before_them(
        make_daemon: Callable[..., Daemon], shell: Shell, docker_client: Any) -> None:
    daemon = with_metrics(make_daemon, PG_SHELL_WARM_PER_SESSION="2")
    assert shell.run("true")["status"] == "done"
    wait_for("the session's two warm containers",
             lambda: metric(daemon, "pg_shell_warm_containers") == 2)
    ready = {c.id for c in warm_containers(docker_client, daemon, shell.session_id)}
    # Each submitted the moment the one before it ended: no pause for a start.
    first = shell.run("echo one")
    second = shell.run("echo two")
    assert (first["output"], second["output"]) == ("one\n", "two\n")
    assert {container_of(shell, first["id"]), container_of(shell, second["id"])} == ready
    assert metric(daemon, "pg_shell_warm_hits_total") == 2
    wait_for("both places filled again", lambda: metric(daemon, "pg_shell_warm_containers") == 2)


def test_a_command_that_timed_out_still_has_its_warm_container_replaced(
        make_daemon: Callable[..., Daemon], shell: Shell, docker_client: Any) -> None:
    # Its completion asks for no start (a command stopped is not one the
    # session is typing on with): the replacement its take put off comes
    # all the same.
    daemon = with_metrics(make_daemon, PG_SHELL_WARM_PER_SESSION="2", PG_SHELL_TIMEOUT_S="2")
    assert shell.run("true")["status"] == "done"
    wait_for("the session's two warm containers",
             lambda: metric(daemon, "pg_shell_warm_containers") == 2)
    row = shell.run("sleep 30")
    assert row["reason"] == "timeout", row
    wait_for("both places filled again", lambda: metric(daemon, "pg_shell_warm_containers") == 2)


def test_the_time_limit_starts_when_the_command_is_handed_over(
        make_daemon: Callable[..., Daemon], shell: Shell, docker_client: Any) -> None:
    daemon = with_metrics(make_daemon, PG_SHELL_TIMEOUT_S="3")
    shell.run("true")
    warm_one(docker_client, daemon, shell)
    time.sleep(4)  # longer than the limit: the warm container waited, the command did not
    row = shell.run("sleep 1; echo finished")
    assert (row["status"], row["output"]) == ("done", "finished\n")


def test_a_warm_container_that_was_killed_is_detected_and_the_command_runs_fresh(
        make_daemon: Callable[..., Daemon], shell: Shell, docker_client: Any) -> None:
    daemon = with_metrics(make_daemon)
    shell.run("echo kept > f")
    warm = warm_one(docker_client, daemon, shell)
    warm.kill()
    row = shell.run("cat f")
    assert (row["status"], row["output"], row["attempts"]) == ("done", "kept\n", 1)
    assert row["container_id"] != warm.id
    assert metric(daemon, 'pg_shell_warm_misses_total{reason="dead"}') == 1
    assert row["container_id"] != container_of(shell, row["id"] - 1)


def test_a_session_never_gets_another_sessions_warm_container(
        make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell],
        docker_client: Any) -> None:
    daemon = with_metrics(make_daemon)
    alice, mallory = make_shell("alice"), make_shell("mallory")
    alice.run("echo secret > f")
    warm = warm_one(docker_client, daemon, alice, held=2)  # and Mallory's new session's
    row = mallory.run("cat ~/f; ls -a ~")
    assert "secret" not in row["output"]
    assert row["container_id"] != warm.id
    # Alice's container still waits for her, and is hers.
    assert [c.id for c in warm_containers(docker_client, daemon, alice.session_id)] == [warm.id]
    assert alice.run("cat f")["output"] == "secret\n"


def test_the_pool_holds_at_most_its_bound_however_many_sessions_are_active(
        make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell],
        docker_client: Any) -> None:
    daemon = make_daemon(PG_SHELL_WARM_MAX="3", PG_SHELL_CONCURRENCY="4").start()
    shells = [make_shell(f"user{i}") for i in range(12)]
    ids = [s.submit("true") for s in shells]

    def waiting() -> int:
        """Warm containers on the engine that no command was handed (a
        taken one is recorded as its command's container first)."""
        on_engine = {c.id for c in warm_containers(docker_client, daemon)}
        handed = {s.command(cid)["container_id"] for s, cid in zip(shells, ids, strict=True)}
        return len(on_engine - handed)

    seen = []
    for s, command_id in zip(shells, ids, strict=True):
        assert s.wait(command_id)["status"] == "done"
        seen.append(waiting())
    wait_for("the pool to fill", lambda: waiting() == 3)
    for _ in range(20):
        seen.append(waiting())
        time.sleep(0.1)
    assert max(seen) == 3


def test_idle_warm_containers_are_removed_and_none_outlives_the_executor(
        make_daemon: Callable[..., Daemon], shell: Shell, make_shell: Callable[[str], Shell],
        docker_client: Any) -> None:
    daemon = with_metrics(make_daemon, PG_SHELL_WARM_IDLE_S="1")
    shell.run("true")
    wait_for("the idle one removed",
             lambda: metric(daemon, 'pg_shell_warm_wasted_total{reason="idle"}') >= 1)
    wait_for("no warm container", lambda: not warm_containers(docker_client, daemon))
    daemon.stop()

    other = with_metrics(make_daemon)
    bob = make_shell("bob")
    bob.run("true")
    warm_one(docker_client, other, bob)
    other.signal(signal.SIGTERM)
    assert other.wait(HANG) == 0
    assert not warm_containers(docker_client, other)


def test_a_new_session_finds_its_first_container_already_started(
        make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell],
        docker_client: Any) -> None:
    daemon = with_metrics(make_daemon)
    shell = make_shell("alice")  # the session is created while the executor listens
    warm = warm_one(docker_client, daemon, shell)
    row = shell.run("pwd; ls -A")
    assert (row["status"], row["output"], row["container_id"]) == ("done", "/home/sandbox\n",
                                                                   warm.id)


def test_a_burst_of_200_new_sessions_never_takes_the_pool_past_its_bound(
        make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell],
        docker_client: Any) -> None:
    daemon = make_daemon(PG_SHELL_WARM_MAX="3").start()
    users = [make_shell(f"burst{i}") for i in range(10)]  # each makes one session
    for user in users:
        for _ in range(19):  # the default quota: 20 sessions a user
            one(user.conn, "SELECT shell_api.create_session('burst')")
    seen = [len(warm_containers(docker_client, daemon))]
    wait_for("the pool to fill", lambda: seen.append(
        len(warm_containers(docker_client, daemon))) or seen[-1] >= 3)
    for _ in range(30):
        seen.append(len(warm_containers(docker_client, daemon)))
        time.sleep(0.1)
    assert max(seen) == 3


def test_opening_an_idle_session_starts_its_next_container(
        make_daemon: Callable[..., Daemon], shell: Shell, make_shell: Callable[[str], Shell],
        docker_client: Any) -> None:
    mallory = make_shell("mallory")  # made while no executor listens: nothing warms for it
    before = with_metrics(make_daemon)
    shell.run("echo kept > f")
    warm_one(docker_client, before, shell)
    before.signal(signal.SIGTERM)  # its warm container goes with it
    assert before.wait(HANG) == 0

    daemon = with_metrics(make_daemon)  # the same host: claiming prefers it for the session
    assert not warm_containers(docker_client, daemon, shell.session_id)
    with pytest.raises(psycopg2.Error):  # another tenant's session cannot be warmed
        one(mallory.conn, "SELECT shell_api.warm_session(%s)", (shell.session_id,))
    one(shell.conn, "SELECT shell_api.warm_session(%s)", (shell.session_id,))
    one(shell.conn, "SELECT shell_api.warm_session(%s)", (shell.session_id,))  # no second one
    warm = warm_one(docker_client, daemon, shell)
    row = shell.run("cat f")
    assert (row["status"], row["output"], row["container_id"]) == ("done", "kept\n", warm.id)
