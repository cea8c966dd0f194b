"""ops/postgrest/postgrest.conf agrees with the gateway and the database.

PostgREST cannot be installed on test machines, so the configuration is
checked against the facts it must match: the schema `pg-shell serve` exposes,
its anonymous role and the roles a token may carry, the authenticator role in
a freshly migrated database, and the JWT secret that the conf's own fill-in
instructions produce (they are run, against the test's database).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jwt
import psycopg2.extensions
import pytest

from executor.db.gateway import API_SCHEMA
from executor.gateway.auth import ANON_ROLE, TOKEN_ROLES
from tests.support import call, connect_as, create_user, one

CONF = Path(__file__).resolve().parents[2] / "ops" / "postgrest" / "postgrest.conf"
FILL_MARK = "# fill-jwt-secret:"


def parse_conf(path: Path) -> dict[str, str | int | bool]:
    """PostgREST's config syntax: key = "string" | number | true/false, # comments."""
    settings: dict[str, str | int | bool] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r'([a-z][a-z0-9-]*)\s*=\s*("(?:[^"\\]|\\.)*"|\d+|true|false)', line)
        assert match, f"not a PostgREST setting: {raw!r}"
        key, value = match.groups()
        assert key not in settings, f"{key} set twice"
        settings[key] = (value[1:-1] if value.startswith('"') else
                         value == "true" if value in ("true", "false") else int(value))
    return settings


@pytest.fixture(scope="module")
def conf() -> dict[str, str | int | bool]:
    return parse_conf(CONF)


def test_conf_exposes_what_the_gateway_exposes(conf: dict[str, str | int | bool]) -> None:
    assert conf["db-schemas"] == API_SCHEMA
    assert conf["db-anon-role"] == ANON_ROLE
    assert conf["jwt-role-claim-key"] == ".role"
    assert conf["jwt-secret-is-base64"] is False
    # Its pre-request caps one user's database slots, as the gateway does.
    assert conf["db-pre-request"] == "shell.request_slot"
    assert conf["server-host"] == "127.0.0.1"


def test_authenticator_in_a_fresh_database(conf: dict[str, str | int | bool], db: str) -> None:
    user = psycopg2.extensions.parse_dsn(str(conf["db-uri"]))["user"]
    assert user == "shell_authenticator"
    conn = psycopg2.connect(db)
    try:
        rows = call(conn, "SELECT rolcanlogin, rolinherit FROM pg_roles WHERE rolname = %s",
                    (user,))
        assert rows == [{"rolcanlogin": True, "rolinherit": False}]
        for role in sorted({ANON_ROLE, *TOKEN_ROLES}):
            assert one(conn, "SELECT pg_has_role(%s, %s, 'MEMBER')", (user, role)), role
        # ... and nothing more: a forged role claim cannot reach the executor's or admin's powers.
        for role in ("shell_executor", "shell_admin"):
            assert not one(conn, "SELECT pg_has_role(%s, %s, 'MEMBER')", (user, role)), role
    finally:
        conn.close()


def test_the_fill_in_instructions_produce_the_databases_secret(
        conf: dict[str, str | int | bool], db: str, tmp_path: Path) -> None:
    secret_ref = str(conf["jwt-secret"])
    assert secret_ref.startswith("@"), "jwt-secret should name the file the instructions fill"
    secret_path = secret_ref[1:]
    fill = [line.split(FILL_MARK, 1)[1].strip() for line in CONF.read_text().splitlines()
            if line.startswith(FILL_MARK)]
    assert len(fill) == 1 and secret_path in fill[0], fill
    target = tmp_path / "jwt-secret"
    env = {**os.environ, "DATABASE_URL": db,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c",
                           fill[0].replace(secret_path, str(target))],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    written = target.read_text()

    conn = psycopg2.connect(db)
    try:
        assert written == one(conn, "SELECT shell.jwt_secret()")
    finally:
        conn.close()
    assert len(written) >= 32  # PostgREST refuses shorter secrets
    assert target.stat().st_mode & 0o077 == 0  # umask 077: not readable by others

    # A token from login() verifies with that secret and carries, at the
    # claim key the conf names, a role PostgREST may switch to.
    create_user(db, "alice", "correct horse")
    anon = connect_as(db, ANON_ROLE)
    try:
        answer = one(anon, "SELECT shell_api.login('alice', 'correct horse')")
    finally:
        anon.close()
    claims = jwt.decode(answer["token"], written, algorithms=["HS256"])
    assert claims["role"] in TOKEN_ROLES
    assert str(conf["jwt-role-claim-key"]).lstrip(".") == "role"


def test_the_pre_request_refuses_a_users_request_beyond_her_slots(
        conf: dict[str, str | int | bool], db: str) -> None:
    """What PostgREST runs before each request (db-pre-request), as the
    request's role: four transactions of one user hold her four slots, a
    fifth is refused with PostgREST's 429 and Retry-After, and another user
    or an anonymous visitor still passes."""
    function = str(conf["db-pre-request"])
    alice, bob = create_user(db, "alice"), create_user(db, "bob")
    held = [connect_as(db, "shell_user", {"sub": alice, "role": "shell_user"}) for _ in range(5)]
    others = [connect_as(db, "shell_user", {"sub": bob, "role": "shell_user"}),
              connect_as(db, ANON_ROLE)]
    try:
        for conn in held + others:
            conn.autocommit = False
        for conn in held[:4]:
            call(conn, f"SELECT {function}()")
        with pytest.raises(psycopg2.Error) as refused:
            call(held[4], f"SELECT {function}()")
        assert refused.value.pgcode == "PGRST"
        assert json.loads(str(refused.value.diag.message_primary)) == {
            "code": "PT429", "message": "too many requests of this user at once (at most 4)",
            "details": None, "hint": "Try again in 1 second."}
        assert refused.value.diag.message_detail == (
            '{"status": 429, "headers": {"Retry-After": "1"}}')
        for conn in others:
            call(conn, f"SELECT {function}()")
        held[4].rollback()
        held[0].commit()  # a slot is free again once a request's transaction ends
        call(held[4], f"SELECT {function}()")
    finally:
        for conn in held + others:
            conn.close()
