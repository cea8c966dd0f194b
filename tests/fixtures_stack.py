"""Fixtures shared by the acceptance, gateway, CLI and browser tests (a
plugin registered in tests/conftest.py): the real `pg-shell executor` daemon
and the real gateway (`pg-shell serve`) as subprocesses, against the test's
fresh database and the real Docker engine."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg2.extensions
import pytest

from tests.daemon import REPO, Daemon
from tests.daemon import executor_env as executor_env_of
from tests.engine_cleanup import remove_labelled


@pytest.fixture
def runtime() -> str:
    """The container runtime the executor runs commands under; tests/security
    overrides it to run every attack under each runtime."""
    return "runc"


@pytest.fixture
def executor_env(db: str, sandbox_image: str, tmp_path: Path, runtime: str) -> dict[str, str]:
    volumes = tempfile.mkdtemp(prefix="pgtest-exec-vol-", dir="/var/tmp")
    return executor_env_of(db, sandbox_image, {
        "PG_SHELL_RUNTIME": runtime,
        "PG_SHELL_WORKER_ID": f"pgtest-{secrets.token_hex(4)}",
        # Each test's database is its own deployment: reaping stays inside it.
        "PG_SHELL_SCOPE": psycopg2.extensions.parse_dsn(db)["dbname"],
        "PG_SHELL_VOLUMES_DIR": volumes,
        "PG_SHELL_DISK_QUOTA_MB": "64",
        "PG_SHELL_TIMEOUT_S": "20",
        "PG_SHELL_HEARTBEAT_INTERVAL_S": "0.5",
        "PG_SHELL_POLL_INTERVAL_S": "0.5",
        "PG_SHELL_SHUTDOWN_GRACE_S": "5",
        # Tests run side by side: a test that scrapes metrics picks a free port.
        "PG_SHELL_METRICS_PORT": "0",
        # A blank container is started as the daemon starts and taken by
        # whichever new session comes first: which container a test's
        # first command runs in would depend on timing. Its tests turn it on.
        "PG_SHELL_WARM_BLANK": "0",
    })


@pytest.fixture
def make_daemon(executor_env: dict[str, str], tmp_path: Path,
                docker_client: Any) -> Iterator[Callable[..., Daemon]]:
    daemons: list[Daemon] = []

    def make(**overrides: str) -> Daemon:
        daemon = Daemon({**executor_env, **overrides}, tmp_path / f"executor-{len(daemons)}.log")
        daemons.append(daemon)
        return daemon

    yield make
    for daemon in daemons:
        daemon.stop()
    for worker_id in {d.env.get("PG_SHELL_WORKER_ID") for d in daemons} - {None}:
        remove_labelled(docker_client, f"pg-shell.worker-id={worker_id}")
    remove_session_volumes(docker_client, executor_env["PG_SHELL_VOLUMES_DIR"])


def remove_session_volumes(docker_client: Any, volumes_dir: str) -> None:
    """The sessions' volumes, their loop devices, and the directory that held them."""
    for image in Path(volumes_dir).glob("*.ext4"):
        volume = image.stem  # the image file is named after its volume
        try:
            docker_client.volumes.get(volume).remove(force=True)
        except Exception:
            pass
        for loop in subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                                   capture_output=True, text=True).stdout.split():
            subprocess.run(["losetup", "-d", loop], check=False)
        image.unlink()
    for marker in Path(volumes_dir).glob("*.blank"):  # a copy born on a blank one's volume
        try:
            docker_client.volumes.get(marker.read_text()).remove(force=True)
        except Exception:
            pass
    shutil.rmtree(volumes_dir, ignore_errors=True)  # the copies' indexes, markers and locks


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon().start()


# -- the gateway ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def authenticator_dsn(dsn: str) -> str:
    """The same database as shell_authenticator (trust auth on the test server)."""
    params = psycopg2.extensions.parse_dsn(dsn)
    params.pop("password", None)
    params["user"] = "shell_authenticator"
    return psycopg2.extensions.make_dsn(**params)


class Gateway:
    """`pg-shell serve` on a free port, logged in as shell_authenticator as
    PostgREST would be; its log is kept for the failure report."""

    def __init__(self, dsn: str, log_path: Path) -> None:
        self.dsn = dsn
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60, **overrides: str) -> Gateway:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
        env.update({"DATABASE_URL": self.dsn,
                    "PG_SHELL_GATEWAY_DATABASE_URL": authenticator_dsn(self.dsn),
                    # Tests run side by side: a test that scrapes metrics picks a free port.
                    "PG_SHELL_GATEWAY_METRICS_PORT": "0", **overrides})
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "executor.cli.main", "serve", "--port", str(self.port)],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                if "Application startup complete" in self.log():
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"gateway exited {self.proc.returncode}:\n{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"gateway never answered on {self.url}:\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def gateway(db: str, tmp_path: Path) -> Iterator[Gateway]:
    """The real gateway against this test's database."""
    gw = Gateway(db, tmp_path / "gateway.log").start()
    yield gw
    gw.stop()


