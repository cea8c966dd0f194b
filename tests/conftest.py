"""Shared fixtures: a real PostgreSQL (DATABASE_URL), a migrated template
database built once per run and cloned for each test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from executor.db import migrations
from executor.db.connection import connect

CI = os.environ.get("CI") == "true"

# The daemon and gateway subprocess fixtures, shared by every test directory.
pytest_plugins = ["tests.fixtures_stack"]


def require(available: bool, what: str) -> None:
    """Skips locally when a service is missing; under CI=true that is a failure."""
    if not available:
        if CI:
            pytest.fail(f"{what} is required under CI=true")
        pytest.skip(f"{what} is not available (set it up with ops/test; under CI this fails)")


def with_database(dsn: str, dbname: str) -> str:
    return psycopg2.extensions.make_dsn(dsn, dbname=dbname)


@pytest.fixture(scope="session")
def admin_dsn() -> str:
    dsn = os.environ.get("DATABASE_URL", "")
    reachable = False
    if dsn:
        try:
            psycopg2.connect(dsn, connect_timeout=3).close()
            reachable = True
        except psycopg2.Error:
            pass
    require(reachable, "PostgreSQL (DATABASE_URL)")
    return dsn


@pytest.fixture(scope="session")
def template_db(admin_dsn: str) -> Iterator[str]:
    name = f"pgshell_tpl_{os.getpid()}"
    admin = connect(admin_dsn)
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cur.execute(f'CREATE DATABASE "{name}"')
    conn = connect(with_database(admin_dsn, name))
    migrations.migrate(conn)
    conn.close()
    yield name
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture
def db(admin_dsn: str, template_db: str) -> Iterator[str]:
    """The DSN (superuser) of a fresh, migrated database for this test."""
    name = f"pgshell_t_{uuid.uuid4().hex[:12]}"
    admin = connect(admin_dsn)
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    try:
        yield with_database(admin_dsn, name)
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="session")
def docker_client():
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception:
        client = None
    require(client is not None, "a Docker engine")
    yield client
    client.close()


def built_image(*args: str) -> str:
    """ops/build-sandbox-image ARGS (an unchanged image is reused): the id it prints."""
    import subprocess

    build = Path(__file__).resolve().parents[1] / "ops" / "build-sandbox-image"
    # The first build runs debootstrap and apt-get: a liveness bound.
    built = subprocess.run([str(build), *args], capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, built.stderr[-4000:]
    return built.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def sandbox_image(docker_client) -> str:
    """The sandbox image id: PG_SHELL_IMAGE (set by ops/test), else built now."""
    ref = os.environ.get("PG_SHELL_IMAGE") or built_image()
    return docker_client.images.get(ref).id


def template_image(name: str) -> str:
    """A template's image built from the project's files (tests/images/templates/NAME)
    FROM the sandbox image."""
    return built_image(str(Path(__file__).parent / "images" / "templates" / name))


@pytest.fixture(scope="session")
def tools_image(sandbox_image: str) -> str:
    """tests/images/templates/tools: a Debian package the base lacks."""
    return template_image("tools")


@pytest.fixture(scope="session")
def hello_image(sandbox_image: str) -> str:
    """tests/images/templates/hello: a program of the project's own."""
    return template_image("hello")
