"""Acceptance fixtures: the real `pg-shell executor` daemon as a subprocess,
against a fresh database and the real Docker engine."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg2.extensions
import pytest

from tests.support import call, create_user, one, tenant

REPO = Path(__file__).resolve().parents[2]
TERMINAL = {"done", "failed", "cancelled"}


class Daemon:
    """One executor process; its log is kept for the failure report."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, **overrides: str) -> Daemon:
        env = {**self.env, **overrides}
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "executor.cli.main", "executor"],
                                     env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        self.wait_for_log("ready", timeout=60)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"executor exited {self.proc.returncode}:\n{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"executor never logged {text!r}:\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def executor_env(db: str, sandbox_image: str, tmp_path: Path) -> dict[str, str]:
    volumes = tempfile.mkdtemp(prefix="pgtest-exec-vol-", dir="/var/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    env.update({
        "DATABASE_URL": db,
        "PG_SHELL_IMAGE": sandbox_image,
        "PG_SHELL_ALLOW_ROOTFUL": "1",
        "PG_SHELL_WORKER_ID": f"pgtest-{secrets.token_hex(4)}",
        # Each test's database is its own deployment: reaping stays inside it.
        "PG_SHELL_SCOPE": psycopg2.extensions.parse_dsn(db)["dbname"],
        "PG_SHELL_VOLUMES_DIR": volumes,
        "PG_SHELL_DISK_QUOTA_MB": "64",
        "PG_SHELL_TIMEOUT_S": "20",
        "PG_SHELL_HEARTBEAT_INTERVAL_S": "0.5",
        "PG_SHELL_POLL_INTERVAL_S": "0.5",
        "PG_SHELL_SHUTDOWN_GRACE_S": "5",
    })
    return env


@pytest.fixture
def make_daemon(executor_env: dict[str, str], tmp_path: Path, docker_client: Any) -> Iterator[Callable[..., Daemon]]:
    daemons: list[Daemon] = []

    def make(**overrides: str) -> Daemon:
        daemon = Daemon({**executor_env, **overrides}, tmp_path / f"executor-{len(daemons)}.log")
        daemons.append(daemon)
        return daemon

    yield make
    for daemon in daemons:
        daemon.stop()
    worker_ids = {d.env["PG_SHELL_WORKER_ID"] for d in daemons}
    for container in docker_client.containers.list(all=True, filters={"label": "pg-shell.command-id"}):
        if container.labels.get("pg-shell.worker-id") in worker_ids:
            container.remove(force=True)
    remove_session_volumes(docker_client, executor_env["PG_SHELL_VOLUMES_DIR"])


def remove_session_volumes(docker_client: Any, volumes_dir: str) -> None:
    for image in Path(volumes_dir).glob("*.ext4"):
        volume = "pg-shell-home-" + image.stem
        try:
            docker_client.volumes.get(volume).remove(force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        for loop in subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                                   capture_output=True, text=True).stdout.split():
            subprocess.run(["losetup", "-d", loop], check=False)
        image.unlink()


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon().start()


class Shell:
    """A tenant's session, driven through the SQL API as PostgREST would."""

    def __init__(self, dsn: str, user_id: str) -> None:
        self.conn = tenant(dsn, user_id)
        self.session_id = one(self.conn, "SELECT shell_api.create_session('test')")

    def submit(self, command: str) -> int:
        return one(self.conn, "SELECT shell_api.submit_command(%s, %s)", (self.session_id, command))

    def command(self, command_id: int) -> dict[str, Any]:
        rows = call(self.conn, "SELECT * FROM shell.commands WHERE id = %s", (command_id,))
        return rows[0]

    def wait(self, command_id: int, timeout: float = 60, until: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
        done = until or (lambda row: row["status"] in TERMINAL)
        deadline = time.monotonic() + timeout
        while True:
            row = self.command(command_id)
            if done(row):
                return row
            if time.monotonic() > deadline:
                raise AssertionError(f"command {command_id} still {row['status']} after {timeout}s")
            time.sleep(0.05)

    def run(self, command: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait(self.submit(command), timeout)

    def cancel(self, command_id: int) -> bool:
        return one(self.conn, "SELECT shell_api.cancel_command(%s)", (command_id,))


@pytest.fixture
def make_shell(db: str) -> Callable[[str], Shell]:
    users: dict[str, str] = {}

    def make(username: str = "alice") -> Shell:
        if username not in users:
            users[username] = create_user(db, username)
        return Shell(db, users[username])

    return make


@pytest.fixture
def shell(make_shell: Callable[[str], Shell]) -> Shell:
    return make_shell()
