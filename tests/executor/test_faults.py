"""Faults the executor must survive: its own death (kill -9), shutdown,
PostgreSQL and the Docker engine going away, plus the promises about its
environment and its start-up checks. Every daemon here is the real
`pg-shell executor` as a subprocess; nothing is mocked. Time bounds only
prove that something did not hang.

The Docker engine restart runs last: the engine is shared with every other
test on this machine."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from executor.db import migrations
from executor.db.connection import connect
from tests.conftest import require
from tests.daemon import descendants
from tests.executor.conftest import REPO, Shell
from tests.support import create_user, tenant, wait_for

PG_BIN = Path("/usr/lib/postgresql/15/bin")
HANG = 120  # seconds: a bound that only proves "it did not hang"


# -- helpers ------------------------------------------------------------------------


def containers(docker_client: Any, container_id: str) -> list[dict[str, Any]]:
    """The command's container (the id its row records: a warm container
    learns its command over stdin and carries no command label), if it is
    still there: the engine's list alone (the SDK's list then inspects each
    one, which fails when the reaper removes it in between)."""
    listed: list[dict[str, Any]] = docker_client.api.containers(all=True,
                                                                filters={"id": container_id})
    return listed


def run_cli(env: dict[str, str], timeout: float = HANG) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "executor.cli.main", "executor"], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)


def running_with_output(row: dict[str, Any]) -> bool:
    return row["status"] == "running" and row["output_bytes"] > 0


def environ_blobs(pid: int) -> dict[str, bytes]:
    """/proc/<pid>/environ of the process, each of its threads, and its descendants'."""
    paths = [Path(f"/proc/{pid}/environ"), *Path(f"/proc/{pid}/task").glob("*/environ")]
    for child in descendants(pid):
        paths += [Path(f"/proc/{child}/environ"), *Path(f"/proc/{child}/task").glob("*/environ")]
    blobs = {}
    for path in paths:
        try:
            blobs[str(path)] = path.read_bytes()
        except OSError:
            pass  # a thread or child that ended meanwhile
    return blobs


# -- the executor dies --------------------------------------------------------------


def test_kill_9_then_restart_with_the_same_worker_id_settles_at_once(make_daemon, shell,
                                                                     docker_client):
    first = make_daemon().start()
    cid = shell.submit("echo ran >> runs; echo started; sleep 30")
    container_id = shell.wait(cid, until=running_with_output)["container_id"]
    assert containers(docker_client, container_id), "the command's container should be running"

    first.proc.kill()  # SIGKILL: no drain, no clean-up
    first.wait()
    assert shell.command(cid)["status"] == "running"  # nobody settled it yet

    make_daemon().start()  # same PG_SHELL_WORKER_ID; start() returns once it is ready
    # Settled during start-up, not after the lease (30 s) ran out.
    row = shell.command(cid)
    assert (row["status"], row["reason"]) == ("failed", "executor lost")
    assert row["output"].startswith("started\n")
    assert containers(docker_client, container_id) == []

    # The session goes on from its last committed files (the lost command's
    # changes are discarded), and the killed command did not run again.
    row = shell.run("cat runs")
    assert (row["status"], row["exit_code"], row["output"]) == (
        "done", 1, "cat: runs: No such file or directory\n")
    assert shell.command(cid)["attempts"] == 1


def test_kill_9_without_a_stable_worker_id_fails_on_lease_expiry_and_reaps(make_daemon, shell,
                                                                           docker_client):
    fast = {"PG_SHELL_LEASE_S": "5", "PG_SHELL_REAP_INTERVAL_S": "1"}
    first = make_daemon(**fast).start()
    first_id = first.env["PG_SHELL_WORKER_ID"]
    cid = shell.submit("echo ran >> runs; echo started; sleep 30")
    container_id = shell.wait(cid, until=running_with_output)["container_id"]
    first.proc.kill()
    first.wait()

    second = make_daemon(**fast, PG_SHELL_WORKER_ID=f"{first_id}-new").start()
    row = shell.wait(cid, timeout=HANG)
    assert (row["status"], row["reason"]) == ("failed", "executor lost")
    assert row["output"].startswith("started\n")
    assert row["worker_id"] == first_id  # settled, not re-claimed by the new worker
    wait_for("orphan container reaped", lambda: not containers(docker_client, container_id))
    assert "removed leftover" in second.log()

    # The lost command's file changes are discarded with it.
    row = shell.run("cat runs")
    assert (row["status"], row["output"], row["worker_id"]) == (
        "done", "cat: runs: No such file or directory\n", second.env["PG_SHELL_WORKER_ID"])


# -- shutdown ---------------------------------------------------------------------------


def test_sigterm_lets_a_short_command_finish_and_claims_nothing_more(make_daemon, make_shell):
    daemon = make_daemon(PG_SHELL_SHUTDOWN_GRACE_S="30").start()
    alice, bob = make_shell("alice"), make_shell("bob")
    cid = alice.submit("echo begin; sleep 2; echo end")
    alice.wait(cid, until=running_with_output)

    daemon.signal(signal.SIGTERM)
    daemon.wait_for_log("draining", timeout=HANG)
    late = bob.submit("echo too late")  # another session: claimable, if anyone still claimed
    assert daemon.wait(timeout=HANG) == 0

    row = alice.command(cid)
    assert (row["status"], row["exit_code"], row["reason"], row["output"]) == ("done", 0, None,
                                                                               "begin\nend\n")
    assert bob.command(late)["status"] == "pending"


def test_sigterm_kills_a_long_command_after_the_grace_period(make_daemon, shell, docker_client):
    daemon = make_daemon(PG_SHELL_SHUTDOWN_GRACE_S="1").start()
    cid = shell.submit("echo begin; sleep 60")
    container_id = shell.wait(cid, until=running_with_output)["container_id"]
    asked = time.monotonic()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout=HANG) == 0
    assert time.monotonic() - asked < HANG / 2  # the grace is 1 s; the command had 60 s to go
    row = shell.command(cid)
    assert (row["status"], row["reason"]) == ("failed", "executor shutdown")
    assert row["output"].startswith("begin\n")
    assert containers(docker_client, container_id) == []


def test_systemd_notify_ready_watchdog_and_stopping(make_daemon):
    sock_dir = tempfile.mkdtemp(prefix="pgtest-notify-")  # short: a socket path has ~100 bytes
    path = os.path.join(sock_dir, "notify")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.settimeout(0.2)
    messages: list[str] = []
    done = threading.Event()

    def receive() -> None:
        while not done.is_set():
            try:
                messages.append(server.recv(4096).decode())
            except TimeoutError:
                continue

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    try:
        daemon = make_daemon(NOTIFY_SOCKET=path).start()
        wait_for("READY=1", lambda: "READY=1" in messages)
        wait_for("WATCHDOG=1 repeated", lambda: messages.count("WATCHDOG=1") >= 3)
        assert messages.index("READY=1") < messages.index("WATCHDOG=1")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(timeout=HANG) == 0
        wait_for("STOPPING=1", lambda: "STOPPING=1" in messages)
        assert "READY=1" not in messages[messages.index("STOPPING=1"):]
    finally:
        done.set()
        reader.join()
        server.close()
        shutil.rmtree(sock_dir, ignore_errors=True)


# -- environments --------------------------------------------------------------------------


def test_a_sessions_env_reaches_only_its_containers(make_daemon, make_shell):
    canary = f"canary-{secrets.token_hex(8)}"
    daemon = make_daemon(PG_SHELL_CANARY=canary).start()
    alice, bob = make_shell("alice"), make_shell("bob")
    secret = f"xyz-{secrets.token_hex(8)}"
    assert alice.run(f"export SESSION_SECRET={secret}")["status"] == "done"

    # While a command of that session runs (its env is in the executor's
    # hands), the executor's processes do not carry it.
    cid = alice.submit('echo "$SESSION_SECRET"; sleep 3')
    alice.wait(cid, until=running_with_output)
    blobs = environ_blobs(daemon.proc.pid)
    # We read the right thing:
    assert blobs and canary.encode() in blobs[f"/proc/{daemon.proc.pid}/environ"]
    assert [p for p, blob in blobs.items() if secret.encode() in blob] == []
    assert alice.wait(cid)["output"] == f"{secret}\n"
    blobs = environ_blobs(daemon.proc.pid)
    assert [p for p, blob in blobs.items() if secret.encode() in blob] == []

    # Another session's container does not see it either ...
    row = bob.run("env")
    assert row["status"] == "done" and "PATH=" in row["output"]
    assert secret not in row["output"] and "SESSION_SECRET" not in row["output"]

    # ... and the executor's own environment reaches no container (the
    # shell's initial environment is what the supervisor gave it; the
    # supervisor's own is not readable: test_security).
    row = alice.run("env; echo ---; tr '\\0' '\\n' < /proc/$$/environ")
    assert (row["status"], row["exit_code"]) == ("done", 0)
    before, after = row["output"].split("---\n")
    assert f"SESSION_SECRET={secret}" in before and f"SESSION_SECRET={secret}" in after
    for leaked in (canary, "PG_SHELL_CANARY", "DATABASE_URL", daemon.env["DATABASE_URL"],
                   "PG_SHELL_WORKER_ID", "DOCKER"):
        assert leaked not in row["output"]


# -- start-up checks ------------------------------------------------------------------------


def test_a_rootful_engine_is_refused_unless_allowed(executor_env, docker_client):
    options = docker_client.info().get("SecurityOptions") or []
    require(not any("name=rootless" in o or "name=userns" in o for o in options),
            "a rootful Docker engine (this test checks that one is refused)")
    env = {k: v for k, v in executor_env.items() if k != "PG_SHELL_ALLOW_ROOTFUL"}
    done = run_cli(env)
    assert done.returncode != 0
    assert "PG_SHELL_ALLOW_ROOTFUL" in done.stderr
    assert "ready" not in done.stderr


@pytest.mark.parametrize(("change", "variable"), [
    ({"PG_SHELL_CONCURRENCY": "0"}, "PG_SHELL_CONCURRENCY"),
    ({"DATABASE_URL": None}, "DATABASE_URL"),
])
def test_invalid_settings_end_with_one_clear_line(executor_env, change, variable):
    env = {**executor_env, **{k: v for k, v in change.items() if v is not None}}
    for name in (k for k, v in change.items() if v is None):
        env.pop(name, None)
        env.pop(f"PG_SHELL_{name}", None)
    done = run_cli(env)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert variable in lines[0] and lines[0].startswith("pg-shell: ")


# -- PostgreSQL goes away ----------------------------------------------------------------------


class Cluster:
    """A PostgreSQL cluster of this test's own, so restarting it disturbs no one."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pgtest-faults-pg-", dir="/var/tmp"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        shutil.chown(self.dir, "postgres", "postgres")

    def as_postgres(self, *args: str, timeout: float = HANG) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, timeout=timeout,
                       capture_output=True, cwd=self.dir)

    def init(self) -> None:
        self.as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A",
                         "trust", "--no-sync", "-E", "UTF8")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"),
                         "-o", options, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self.as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60",
                         "stop")

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"),
                            "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                           capture_output=True, timeout=HANG, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    require((PG_BIN / "initdb").exists() and shutil.which("runuser") is not None,
            "PostgreSQL 15 server binaries (initdb, pg_ctl) and runuser")
    cluster = Cluster()
    try:
        cluster.init()
        cluster.start()
        conn = connect(cluster.dsn)
        migrations.migrate(conn)
        conn.close()
        yield cluster
    finally:
        cluster.destroy()


def test_postgres_restart_mid_command_loses_and_duplicates_nothing(make_daemon, cluster,
                                                                   docker_client):
    user_id = create_user(cluster.dsn, "alice")
    shell = Shell(cluster.dsn, user_id)
    daemon = make_daemon(DATABASE_URL=cluster.dsn).start()
    cid = shell.submit("echo ran >> runs; echo a; sleep 4; echo b")
    container_id = shell.wait(cid, until=running_with_output)["container_id"]
    shell.conn.close()

    cluster.stop("fast")
    # The command finishes while the database is down; its result waits (and
    # its container with it: only the supervisor is left in it).
    wait_for("the command ended during the outage",
             lambda: len(docker_client.api.top(container_id)["Processes"]) == 1)
    time.sleep(2)
    assert daemon.proc.poll() is None
    cluster.start()

    shell.conn = reconnect(cluster.dsn, user_id)
    row = shell.wait(cid, timeout=HANG)
    assert (row["status"], row["exit_code"], row["reason"], row["output"]) == ("done", 0, None,
                                                                               "a\nb\n")
    assert row["attempts"] == 1
    row = shell.run("cat runs", timeout=HANG)
    assert (row["status"], row["output"]) == ("done", "ran\n")
    assert daemon.proc.poll() is None
    daemon.stop()
    assert daemon.proc.returncode == 0


def reconnect(dsn: str, user_id: str):
    def attempt():
        try:
            return tenant(dsn, user_id)
        except psycopg2.OperationalError:
            return None

    return wait_for("database back", attempt, every=0.5)


# -- the Docker engine goes away (keep last: the engine is shared) ------------------------------


def local_dockerd() -> int | None:
    """The pid of the root dockerd this machine's tests use, if it was started
    the way ops/docker-engine starts it (plain `dockerd`, default socket)."""
    if os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock") not in (
            "unix:///var/run/docker.sock", "unix:///run/docker.sock"):
        return None
    found = subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, text=True,
                           check=False).stdout.split()
    if len(found) != 1:
        return None
    pid = int(found[0])
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    status = Path(f"/proc/{pid}/status").read_text()
    uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
    return pid if cmdline[:2] == [b"dockerd", b""] and uid == "0" and os.geteuid() == 0 else None


def engine_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30,
                          check=False).returncode == 0


def restart_dockerd(pid: int) -> None:
    """Stops the engine (SIGTERM, as systemd would) and starts it again the
    way the project does. Other tests share this engine: whatever happens,
    leave it running."""
    try:
        os.kill(pid, signal.SIGTERM)
        wait_for("dockerd exited", lambda: not Path(f"/proc/{pid}").exists(), timeout=HANG,
                 every=0.2)
    finally:
        for _ in range(3):
            started = subprocess.run([str(REPO / "ops" / "docker-engine")], timeout=HANG,
                                     capture_output=True, text=True, check=False)
            if started.returncode == 0 and engine_answers():
                break
        else:
            raise AssertionError("ops/docker-engine could not restart the engine: "
                                 f"{started.stderr[-2000:]}")


def test_zz_docker_engine_restart_mid_command(make_daemon, shell, docker_client):
    pid = local_dockerd()
    require(pid is not None,
            "a local root dockerd started as ops/docker-engine does (to restart it)")
    daemon = make_daemon(PG_SHELL_REAP_INTERVAL_S="1").start()
    cid = shell.submit("echo ran >> runs; echo started; sleep 60")
    container_id = shell.wait(cid, until=running_with_output)["container_id"]

    restart_dockerd(pid)
    row = shell.wait(cid, timeout=HANG)
    assert row["status"] == "failed", row
    assert (row["reason"] or "").startswith(("engine error", "executor lost")), row["reason"]
    assert row["output"].startswith("started\n")
    assert daemon.proc.poll() is None

    # The same daemon reconnects: the next command runs (from the last
    # committed files: the failed command's changes are discarded), and the
    # first did not run again.
    row = shell.run("cat runs", timeout=HANG)
    assert (row["status"], row["exit_code"], row["output"]) == (
        "done", 1, "cat: runs: No such file or directory\n")
    assert shell.command(cid)["attempts"] == 1
    wait_for("leftover container reaped", lambda: not containers(docker_client, container_id))
    assert daemon.proc.poll() is None
