"""Every SQL path a client reaches has a statement timeout: set on shell_anon
and shell_user (ALTER ROLE … SET), which PostgREST applies per transaction
and so does the gateway; and the gateway will not serve from a login role
that row-level security does not bind (superuser, BYPASSRLS)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg2
import psycopg2.extensions
import pytest

from tests.fixtures_stack import REPO, Gateway, free_port
from tests.support import call, create_user

pytestmark = pytest.mark.postgres


def admin(db: str) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(db)
    conn.autocommit = True
    return conn


def test_the_client_roles_carry_a_statement_timeout(db: str) -> None:
    conn = admin(db)
    try:
        rows = call(conn, "SELECT rolname, rolconfig FROM pg_roles"
                          " WHERE rolname IN ('shell_anon', 'shell_user') ORDER BY rolname")
    finally:
        conn.close()
    assert rows == [{"rolname": "shell_anon", "rolconfig": ["statement_timeout=10s"]},
                    {"rolname": "shell_user", "rolconfig": ["statement_timeout=10s"]}]


@pytest.fixture
def slow_gateway(db: str, tmp_path: Path) -> Iterator[Gateway]:
    """A gateway over a database with a function that outlasts the roles'
    statement timeout, shortened in this database only."""
    conn = admin(db)
    try:
        dbname = psycopg2.extensions.parse_dsn(db)["dbname"]
        for role in ("shell_anon", "shell_user"):
            call(conn, f'ALTER ROLE {role} IN DATABASE "{dbname}" SET statement_timeout = 300')
        call(conn, "CREATE FUNCTION shell_api.pgtest_sleep() RETURNS integer LANGUAGE sql"
                   " AS 'SELECT 1 FROM pg_sleep(5)'")
        call(conn, "GRANT EXECUTE ON FUNCTION shell_api.pgtest_sleep() TO shell_anon, shell_user")
    finally:
        conn.close()
    gw = Gateway(db, tmp_path / "gateway.log").start()
    yield gw
    gw.stop()


def test_the_gateway_applies_the_roles_statement_timeout(db: str, slow_gateway: Gateway) -> None:
    create_user(db, "alice")
    with httpx.Client(base_url=slow_gateway.url, timeout=30) as http:
        token = http.post("/rpc/login", json={"p_username": "alice", "p_password": "correct horse"}
                          ).json()["token"]
        for headers in ({}, {"Authorization": f"Bearer {token}"}):
            answer = http.post("/rpc/pgtest_sleep", json={}, headers=headers)
            assert answer.json()["code"] == "57014", answer.text
            assert answer.json()["message"] == "canceling statement due to statement timeout"


def serve(gateway_dsn: str, db: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    env.update({"DATABASE_URL": db, "PG_SHELL_GATEWAY_DATABASE_URL": gateway_dsn,
                "PG_SHELL_GATEWAY_METRICS_PORT": "0"})
    return subprocess.run([sys.executable, "-m", "executor.cli.main", "serve",
                           "--port", str(free_port())],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_serve_refuses_a_superuser_login(db: str) -> None:
    done = serve(db, db)  # the test's DSN is a superuser's
    assert done.returncode == 1
    assert "is a superuser: row-level security would not hold" in done.stderr
    assert "PG_SHELL_GATEWAY_DATABASE_URL" in done.stderr
    assert "shell_authenticator" in done.stderr


@pytest.fixture
def bypassrls_dsn(db: str) -> Iterator[str]:
    role = f"pgtest_bypass_{secrets.token_hex(4)}"
    conn = admin(db)
    try:
        call(conn, f"CREATE ROLE {role} LOGIN BYPASSRLS")
        params = psycopg2.extensions.parse_dsn(db)
        params.pop("password", None)
        yield psycopg2.extensions.make_dsn(**{**params, "user": role})
    finally:
        call(conn, f"DROP ROLE {role}")
        conn.close()


def test_serve_refuses_a_bypassrls_login(db: str, bypassrls_dsn: str) -> None:
    done = serve(bypassrls_dsn, db)
    assert done.returncode == 1
    assert "is BYPASSRLS: row-level security would not hold" in done.stderr
