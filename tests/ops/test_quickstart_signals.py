"""ops/quickstart stops everything it started: on SIGTERM (a service manager,
a CI job), SIGINT (Ctrl-C) and SIGHUP (a closed terminal), sent to the script
alone, and when one of its services dies; killed outright (SIGKILL), its
services still stop on their own. The script really runs: on this
test's database (quickstart uses a DATABASE_URL that answers, and never stops
that server), on the running engine, with the test's sandbox image, a state
dir and a UI port of its own. A command is running in the sandbox when the
signal comes, so the executor has something to drain.

"Nothing left" is read from the process table: every process that carries
this run's PG_SHELL_STATE_DIR in its environment (the script, its services,
anything they started), and every running container of its executor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from tests.engine_cleanup import remove_labelled
from tests.executor.conftest import TERMINAL
from tests.fixtures_stack import REPO, executor_env, free_port  # noqa: F401
from tests.support import one, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.docker]

# Liveness bounds, never timing claims: set-up on a busy machine, and the
# executor's drain (PG_SHELL_SHUTDOWN_GRACE_S is 5 s here) plus the UI's exit.
READY_WITHIN_S = 600
STOPPED_WITHIN_S = 120


def default_signals() -> None:
    """The signals under test as a terminal delivers them: a test run started
    in the background or under nohup passes SIGINT or SIGHUP on ignored, and
    a shell cannot trap a signal ignored when it started."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


class Quickstart:
    """ops/quickstart as a subprocess, its output (stdout and stderr) in a file."""

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.state = tmp / "state"
        self.port = free_port()
        self.worker_id = env["PG_SHELL_WORKER_ID"]
        self.env = {**env, "PG_SHELL_STATE_DIR": str(self.state),
                    "PG_SHELL_LISTEN_PORT": str(self.port), "PG_SHELL_GATEWAY_METRICS_PORT": "0"}
        self.out_path = tmp / "quickstart.out"
        with open(self.out_path, "wb") as out:
            # A session of its own: a signal sent here reaches the script alone,
            # and nothing this test's terminal does reaches it.
            self.proc = subprocess.Popen([str(REPO / "ops" / "quickstart")], env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=REPO,
                                         start_new_session=True, preexec_fn=default_signals)

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_WITHIN_S
        while "pg_shell is running" not in self.output():
            assert self.proc.poll() is None, f"quickstart exited early:\n{self.output()[-4000:]}"
            assert time.monotonic() < deadline, f"quickstart never came up:\n{self.output()}"
            time.sleep(0.2)

    def wait_exit(self) -> int:
        try:
            return self.proc.wait(STOPPED_WITHIN_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"quickstart did not stop:\n{self.output()[-4000:]}") from None

    def processes(self) -> dict[int, str]:
        """pid → command line of every process carrying this run's state dir."""
        marker = f"PG_SHELL_STATE_DIR={self.state}".encode()
        found = {}
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if marker not in (proc / "environ").read_bytes().split(b"\0"):
                    continue
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ") \
                    .decode(errors="replace").strip()
            except OSError:
                continue  # gone meanwhile, or not ours to read
        return found

    def kill_all(self) -> None:
        """After a failed test: whatever is left, so the next test starts clean."""
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def run_in_sandbox(self, db: str, command: str) -> int:
        """Submits ``command`` as the demo user through the UI's API, and waits
        until it runs; its id."""
        password = (self.state / "demo-password").read_text().strip()
        token = self.rpc("login", {"p_username": "demo", "p_password": password})["token"]
        session = self.rpc("create_session", {}, token)
        command_id = int(self.rpc("submit_command",
                                  {"p_session_id": session, "p_command": command}, token))
        wait_for(f"command {command_id} to run",
                 lambda: command_status(db, command_id) == "running", timeout=READY_WITHIN_S)
        return command_id

    def rpc(self, function: str, args: dict[str, Any], token: str | None = None) -> Any:
        headers = {"Content-Type": "application/json",
                   **({"Authorization": f"Bearer {token}"} if token else {})}
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/rpc/{function}",
                                         data=json.dumps(args).encode(), headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())


def command_status(db: str, command_id: int) -> str:
    conn = psycopg2.connect(db)  # the test's own database, as its superuser
    try:
        return str(one(conn, "SELECT status FROM shell.commands WHERE id = %s", (command_id,)))
    finally:
        conn.close()


@pytest.fixture
def quickstart(executor_env: dict[str, str], tmp_path: Path,  # noqa: F811
               docker_client: Any) -> Iterator[Quickstart]:
    started = Quickstart(executor_env, tmp_path)
    try:
        yield started
    finally:
        if started.proc.poll() is None:
            started.proc.kill()
        started.kill_all()
        # The executor removes its own; this is only what a failure left.
        remove_labelled(docker_client, f"pg-shell.worker-id={started.worker_id}")


def assert_nothing_left(quickstart: Quickstart, docker_client: Any) -> None:
    assert quickstart.processes() == {}, quickstart.output()[-3000:]
    running = docker_client.containers.list(
        sparse=True, filters={"label": f"pg-shell.worker-id={quickstart.worker_id}"})
    assert [c.id for c in running] == []


@pytest.mark.timeout(READY_WITHIN_S + 2 * STOPPED_WITHIN_S)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_to_quickstart_stops_every_process_it_started(
        quickstart: Quickstart, signum: int, db: str, docker_client: Any) -> None:
    quickstart.wait_ready()
    services = quickstart.processes()
    assert len(services) >= 3, services  # the script, the executor and the UI at least
    command_id = quickstart.run_in_sandbox(db, "sleep 600")

    quickstart.proc.send_signal(signum)
    assert quickstart.wait_exit() == 128 + signum
    assert_nothing_left(quickstart, docker_client)
    assert "stopping the executor and the UI" in quickstart.output()
    # The executor drained: it recorded how the command it was running ended.
    assert command_status(db, command_id) in TERMINAL


@pytest.mark.timeout(READY_WITHIN_S + 2 * STOPPED_WITHIN_S)
def test_a_service_that_dies_stops_quickstart_and_the_other_service(
        quickstart: Quickstart, docker_client: Any) -> None:
    quickstart.wait_ready()
    [ui] = [pid for pid, argv in quickstart.processes().items() if " serve " in f"{argv} "]
    os.kill(ui, signal.SIGKILL)

    assert quickstart.wait_exit() == 1
    assert_nothing_left(quickstart, docker_client)
    assert "error: the UI stopped" in quickstart.output()


@pytest.mark.timeout(READY_WITHIN_S + 2 * STOPPED_WITHIN_S)
def test_services_stop_on_their_own_when_quickstart_is_killed_outright(
        quickstart: Quickstart, docker_client: Any) -> None:
    quickstart.wait_ready()
    quickstart.proc.kill()  # SIGKILL: no trap runs
    quickstart.proc.wait(STOPPED_WITHIN_S)
    # The parent-death signal (SIGTERM) reached them; they drain and exit.
    wait_for("quickstart's services to stop", lambda: not quickstart.processes(),
             timeout=STOPPED_WITHIN_S)
    assert_nothing_left(quickstart, docker_client)
