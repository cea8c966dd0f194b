"""Audit fixtures: history produced once per module by the real executor
daemon (and the real Docker engine), then cloned into a fresh database for
each test, which may tamper with it as superuser."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg2.extensions
import pytest

from executor.audit.records import GENESIS, chain_hash
from executor.db.connection import connect, query
from tests.conftest import with_database
from tests.executor.conftest import REPO, Daemon, Shell, remove_session_volumes
from tests.support import call, create_user


def cli(dsn: str | None, *args: str,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs `pg-shell ARGS` against ``dsn``."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    run_env.pop("DATABASE_URL", None)
    if dsn:
        run_env["DATABASE_URL"] = dsn
    run_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "executor.cli.main", *args], env=run_env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def verify(dsn: str, *args: str) -> tuple[int, dict[str, Any]]:
    done = cli(dsn, "audit", "verify", "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


class History:
    """What the module's history holds: command ids by name, sessions."""

    def __init__(self, template: str, key_file: Path, ids: dict[str, int], sessions: dict[str, str],
                 users: dict[str, str]) -> None:
        self.template = template
        self.key_file = key_file
        self.ids = ids
        self.sessions = sessions
        self.users = users


Script = Callable[[Daemon, Shell, Shell], dict[str, int]]


@contextlib.contextmanager
def recorded(admin_dsn: str, template_db: str, sandbox_image: str, docker_client: Any,
             tmp: Path, script: Script) -> Iterator[History]:
    """A database holding the history ``script`` makes: it drives alice's and
    bob's sessions (the daemon not yet started) and returns command ids by
    name. The database is the template each test's copy is cloned from."""
    name = f"pgshell_h_{uuid.uuid4().hex[:12]}"
    admin = connect(admin_dsn)
    query(admin, f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    dsn = with_database(admin_dsn, name)
    volumes = tempfile.mkdtemp(prefix="pgtest-audit-vol-", dir="/var/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    env.update({
        "DATABASE_URL": dsn, "PG_SHELL_IMAGE": sandbox_image, "PG_SHELL_ALLOW_ROOTFUL": "1",
        "PG_SHELL_WORKER_ID": f"pgtest-{secrets.token_hex(4)}", "PG_SHELL_SCOPE": name,
        "PG_SHELL_VOLUMES_DIR": volumes, "PG_SHELL_DISK_QUOTA_MB": "64", "PG_SHELL_TIMEOUT_S": "20",
        "PG_SHELL_HEARTBEAT_INTERVAL_S": "0.5", "PG_SHELL_POLL_INTERVAL_S": "0.5",
        "PG_SHELL_SHUTDOWN_GRACE_S": "5", "PG_SHELL_SIGNING_KEY_FILE": str(tmp / "signing-key"),
    })
    daemon = Daemon(env, tmp / "executor.log")
    shells: list[Shell] = []
    try:
        users = {"alice": create_user(dsn, "alice"), "bob": create_user(dsn, "bob")}
        a, b = Shell(dsn, users["alice"]), Shell(dsn, users["bob"])
        shells += [a, b]
        ids = script(daemon, a, b)
        daemon.stop()
        sessions = {"alice": str(a.session_id), "bob": str(b.session_id)}
        for shell in shells:
            shell.conn.close()
        shells.clear()
        yield History(name, tmp / "signing-key", ids, sessions, users)
    finally:
        daemon.stop()
        for shell in shells:
            shell.conn.close()
        for container in docker_client.containers.list(all=True, filters={
                "label": f"pg-shell.worker-id={env['PG_SHELL_WORKER_ID']}"}):
            try:
                container.remove(force=True)
            except Exception:
                pass
        remove_session_volumes(docker_client, volumes)
        query(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _commands(daemon: Daemon, a: Shell, b: Shell) -> dict[str, int]:
    ids: dict[str, int] = {}
    # Cancelled while pending, before any executor runs: a database record.
    ids["cancelled"] = a.submit("echo never")
    assert a.cancel(ids["cancelled"])
    daemon.start()
    ids["hello"] = a.run("echo hello")["id"]
    ids["state"] = a.run("mkdir -p w && cd w && export GREETING=hi")["id"]
    ids["false"] = a.run("false")["id"]
    ids["nul"] = a.run("printf 'a\\0b\\n'; echo after")["id"]
    ids["last"] = a.run('echo "$GREETING from $PWD"')["id"]
    ids["bob"] = b.run("echo bob")["id"]
    assert a.command(ids["nul"])["output"] == "a\ufffdb\nafter\n"
    assert a.command(ids["last"])["output"] == "hi from /home/sandbox/w\n"
    return ids


def history_of(script: Script) -> Any:
    """A module's ``history`` fixture: the history ``script`` makes, made once."""
    @pytest.fixture(scope="module")
    def history(admin_dsn: str, template_db: str, sandbox_image: str, docker_client: Any,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
        with recorded(admin_dsn, template_db, sandbox_image, docker_client,
                      tmp_path_factory.mktemp("history"), script) as made:
            yield made

    return history


history = history_of(_commands)


Sql = Callable[..., list[dict[str, Any]]]  # runs a statement as superuser (the attacker)


def relink(sql: Sql, session_id: str, command_ids: list[int]) -> None:
    """Makes ``command_ids`` the session's whole chain, in this order, with
    every hash recomputed: what an attacker does to hide a change."""
    sql("UPDATE shell.commands SET chain_seq = -id WHERE session_id = %s AND chain_seq > 0",
        (session_id,))
    prev = GENESIS
    for seq, cid in enumerate(command_ids, 1):
        record = sql("SELECT result_record FROM shell.commands WHERE id = %s", (cid,))[0]
        link = chain_hash(prev, record["result_record"])
        sql("UPDATE shell.commands SET chain_seq = %s, chain_prev = %s, chain_hash = %s"
            " WHERE id = %s", (seq, prev, link, cid))
        prev = link
    sql("UPDATE shell.lanes SET chain_seq = %s, chain_head = %s WHERE session_id = %s",
        (len(command_ids), prev, session_id))


@pytest.fixture
def copy(admin_dsn: str, history: History) -> Iterator[str]:
    """A fresh copy of the module's history (superuser DSN)."""
    name = f"pgshell_a_{uuid.uuid4().hex[:12]}"
    admin = connect(admin_dsn)
    query(admin, f'CREATE DATABASE "{name}" TEMPLATE "{history.template}"')
    try:
        yield with_database(admin_dsn, name)
    finally:
        query(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def sql(copy: str) -> Iterator[Callable[..., list[dict[str, Any]]]]:
    """Runs statements on the copy as superuser (the attacker)."""
    conn = psycopg2.connect(copy)
    conn.autocommit = True

    def run(statement: str, params: Any = None) -> list[dict[str, Any]]:
        return call(conn, statement, params)

    yield run
    conn.close()
