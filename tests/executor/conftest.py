"""Acceptance fixtures: a tenant's session driven through the SQL API. The
real `pg-shell executor` daemon fixtures live in tests/fixtures_stack.py
(a plugin every test directory shares)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

# Re-exported: modules import these from here.
from tests.fixtures_stack import (  # noqa: F401
    REPO,
    Daemon,
    daemon,
    executor_env,
    make_daemon,
    remove_session_volumes,
)
from tests.support import call, create_user, one, tenant

TERMINAL = {"done", "failed", "cancelled"}


class Shell:
    """A tenant's session, driven through the SQL API as PostgREST would."""

    def __init__(self, dsn: str, user_id: str, template: str | None = None) -> None:
        self.conn = tenant(dsn, user_id)
        self.session_id = one(self.conn, "SELECT shell_api.create_session('test', %s)",
                              (template,))

    def submit(self, command: str) -> int:
        return one(self.conn, "SELECT shell_api.submit_command(%s, %s)", (self.session_id, command))

    def command(self, command_id: int) -> dict[str, Any]:
        rows = call(self.conn, "SELECT c.*, shell.output_of(c) AS output FROM shell.commands c"
                    " WHERE id = %s", (command_id,))
        return rows[0]

    def wait(self, command_id: int, timeout: float = 60,
             until: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
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

    def make(username: str = "alice", template: str | None = None) -> Shell:
        if username not in users:
            users[username] = create_user(db, username)
        return Shell(db, users[username], template)

    return make


@pytest.fixture
def shell(make_shell: Callable[[str], Shell]) -> Shell:
    return make_shell()
