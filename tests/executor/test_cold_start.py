"""A new session's first command against the real daemon and engine: its
home is made empty here, so nothing restores it, and the container started
for the session as it was created is the command's own (never a second one
beside it). The command runs once. With a blank container started ahead,
that container is the first command's."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from tests.executor.conftest import Shell
from tests.executor.test_warm import metric
from tests.fixtures_stack import Daemon, free_port
from tests.support import wait_for


def containers_created(docker_client: Any, session_id: str,
                       since: datetime.datetime) -> list[str]:
    """Ids of the containers made for the session since ``since``, restores included."""
    events = docker_client.events(
        since=since, until=datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1),
        filters={"type": "container", "event": "create",
                 "label": f"pg-shell.session-id={session_id}"}, decode=True)
    return [event["id"] for event in events]


def test_the_first_command_of_a_new_session_starts_no_container_but_its_own(
        make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell],
        docker_client: Any) -> None:
    # One warm container per session: the one started ahead is then the only other.
    daemon = make_daemon(PG_SHELL_WARM_PER_SESSION="1").start()
    since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    shell = make_shell("alice")  # announced: the daemon may start its container now
    row = shell.run("pwd; ls -A; echo kept > f")  # submitted at once, as a client would
    assert (row["status"], row["output"], row["attempts"]) == ("done", "/home/sandbox\n", 1)

    # After it, the session's next container is started ahead: the only other one.
    labels = ["pg-shell.warm=1", f"pg-shell.session-id={shell.session_id}",
              f"pg-shell.worker-id={daemon.env['PG_SHELL_WORKER_ID']}"]
    [next_one] = wait_for("the next warm container", lambda: [
        c for c in docker_client.containers.list(all=True, sparse=True, filters={"label": labels})
        if c.id != row["container_id"]])
    assert sorted(containers_created(docker_client, shell.session_id, since)) == sorted(
        [row["container_id"], next_one.id])
    # What it wrote is the session's: the next command (in that container) sees it.
    assert shell.run("cat f")["output"] == "kept\n"


def test_a_new_session_s_first_command_runs_in_the_blank_container_started_ahead(
        make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell],
        docker_client: Any) -> None:
    daemon = make_daemon(PG_SHELL_WARM_BLANK="1", PG_SHELL_WARM_PER_SESSION="1",
                         PG_SHELL_METRICS_PORT=str(free_port())).start()

    def blanks() -> list[Any]:
        labels = ["pg-shell.warm=1", f"pg-shell.worker-id={daemon.worker_id}"]
        return [c for c in docker_client.containers.list(sparse=True, filters={"label": labels})
                if c.attrs["Labels"].get("pg-shell.session-id") == ""]

    [blank] = wait_for("the blank container", blanks)
    shell = make_shell("alice")
    row = shell.run("pwd; ls -A; echo kept > f")
    assert (row["status"], row["output"], row["container_id"]) == (
        "done", "/home/sandbox\n", blank.id)
    # The next blank is started once that command ended.
    wait_for("another blank container", lambda: [c for c in blanks() if c.id != blank.id])

    # The next command runs on the session's own volume: the same file
    # system, and its capture still scans only what the change record names.
    walks = {walk: metric(daemon, f'pg_shell_capture_scans_total{{walk="{walk}"}}')
             for walk in ("changed", "home")}
    row = shell.run("cat f; echo two > g")
    assert (row["status"], row["output"]) == ("done", "kept\n")
    assert row["container_id"] != blank.id
    assert metric(daemon, 'pg_shell_capture_scans_total{walk="changed"}') == walks["changed"] + 1
    assert metric(daemon, 'pg_shell_capture_scans_total{walk="home"}') == walks["home"]
    assert shell.run("cat g")["output"] == "two\n"
