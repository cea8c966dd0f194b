"""Observability fixtures: the real executor daemon (with its metrics port)
and gateway, a CLI pointed at the gateway, and tenants driven through SQL
as PostgREST would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_stack import REPO, Daemon, Gateway, free_port
from tests.support import call, create_user, one, tenant, wait_for

PASSWORD = "correct horse"
TERMINAL = {"done", "failed", "cancelled"}
HANG = 120  # seconds: only proves that something did not hang


class Tenant:
    """A user with a session, driven through the SQL API."""

    def __init__(self, dsn: str, username: str) -> None:
        self.user_id = create_user(dsn, username, PASSWORD)
        self.conn = tenant(dsn, self.user_id)
        self.session_id = str(one(self.conn, "SELECT shell_api.create_session('obs')"))

    def submit(self, command: str, session_id: str | None = None) -> int:
        return int(one(self.conn, "SELECT shell_api.submit_command(%s, %s)",
                       (session_id or self.session_id, command)))

    def command(self, command_id: int) -> dict[str, Any]:
        return call(self.conn, "SELECT c.*, shell.output_of(c) AS output FROM shell.commands c"
                    " WHERE id = %s", (command_id,))[0]

    def wait(self, command_id: int) -> dict[str, Any]:
        return wait_for(f"command {command_id} to end",
                        lambda: (row := self.command(command_id))["status"] in TERMINAL and row)

    def run(self, command: str) -> dict[str, Any]:
        return self.wait(self.submit(command))


class Cli:
    """`pg-shell` as a subprocess with its own config directory."""

    def __init__(self, url: str, home: Path, database_url: str | None = None) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
        self.env.pop("DATABASE_URL", None)
        if database_url:
            self.env["DATABASE_URL"] = database_url
        self.env.update({"PG_SHELL_URL": url, "XDG_CONFIG_HOME": str(home / "config"),
                         "HOME": str(home)})

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "executor.cli.main", *args]

    def __call__(self, *args: str, input: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), input=input, capture_output=True, text=True,
                              check=False, env=self.env, cwd=REPO, timeout=HANG)

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, env=self.env, cwd=REPO)


@pytest.fixture
def metrics_daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    """The executor serving /metrics on a free port, reading the queue depth often."""
    return make_daemon(PG_SHELL_METRICS_PORT=str(free_port()), PG_SHELL_METRICS_INTERVAL_S="0.2",
                       PG_SHELL_TIMEOUT_S="120").start()


@pytest.fixture
def make_tenant(db: str) -> Callable[[str], Tenant]:
    return lambda username: Tenant(db, username)


@pytest.fixture
def alice_cli(gateway: Gateway, make_tenant: Callable[[str], Tenant],
              tmp_path: Path) -> tuple[Cli, Tenant]:
    """alice, logged in through the CLI, with PG_SHELL_SESSION set to her session."""
    alice = make_tenant("alice")
    cli = Cli(gateway.url, tmp_path)
    logged_in = cli("login", "alice", input=PASSWORD + "\n")
    assert logged_in.returncode == 0, logged_in.stderr
    cli.env["PG_SHELL_SESSION"] = alice.session_id
    return cli, alice
