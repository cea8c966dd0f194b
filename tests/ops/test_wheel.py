"""pg_shell installed as a package: a wheel built from this checkout, installed
into a fresh virtualenv (its dependencies offline, from the wheelhouse
ops/compose/prepare builds), runs from a directory far from any checkout:
`pg-shell db migrate` creates the schema in an empty database, `pg-shell serve`
serves the web UI, `pg-shell executor` runs a command in the sandbox, and
`pg-shell image build` finds the very image this checkout builds (same build
context, same modes, so the same content hash and id)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from executor.db.connection import connect
from tests.conftest import with_database
from tests.engine_cleanup import remove_labelled
from tests.fixtures_stack import REPO, authenticator_dsn, free_port, remove_session_volumes
from tests.support import call, create_user, one, tenant, wait_for

# What setup.py and MANIFEST.in need to build the wheel: a copy of them, so
# stale build/ output in the checkout can never reach the wheel.
SOURCES = ["executor", "sql", "html", "sandbox-image", "ops/build-sandbox-image",
           "pyproject.toml", "setup.py", "MANIFEST.in", "README.md"]
WHEELHOUSE = REPO / "ops" / "compose" / "build"


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ of a fresh virtualenv holding the wheel and its dependencies."""
    run([str(REPO / "ops" / "compose" / "prepare")], timeout=1500)
    tmp = tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        source, target = REPO / name, tmp / "src" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target)
    # The wheelhouse's own virtualenv has the pinned setuptools and wheel: no index needed.
    run([str(WHEELHOUSE / "venv" / "bin" / "python"), "-m", "pip", "wheel", "-q", "--no-deps",
         "--no-build-isolation", "--wheel-dir", str(tmp / "dist"), str(tmp / "src")])
    [wheel] = (tmp / "dist").glob("pg_shell-*.whl")
    run([sys.executable, "-m", "venv", str(tmp / "venv")])
    run([str(tmp / "venv" / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
         "--no-index", "--find-links", str(WHEELHOUSE / "wheels"), str(wheel)])
    return tmp / "venv" / "bin"


@pytest.fixture
def empty_db(admin_dsn: str) -> Iterator[str]:
    name = f"pgshell_wheel_{uuid.uuid4().hex[:12]}"
    admin = connect(admin_dsn)
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(admin_dsn, name)
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory with no checkout above it."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    return cwd


def test_the_wheel_carries_the_files_beside_the_code(installed: Path) -> None:
    code = ("from executor.resources import resource_dir as r; "
            "print(r('sql'), r('html'), r('sandbox-image'), r('ops/build-sandbox-image'))")
    done = run([str(installed / "python"), "-c", code], cwd="/")
    for path in done.stdout.split():
        assert "/site-packages/executor/_share/" in path
    shipped = Path(done.stdout.split()[2])
    for name in ("run", "supervisor"):
        assert (shipped / name).stat().st_mode & 0o111, f"{name} lost its executable bit"


def test_migrate_then_serve_the_ui_from_any_directory(installed: Path, empty_db: str,
                                                       elsewhere: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "DATABASE_URL": empty_db}
    run([str(installed / "pg-shell"), "db", "migrate"], cwd=elsewhere, env=env)
    status = run([str(installed / "pg-shell"), "db", "status"], cwd=elsewhere, env=env).stdout
    assert "pending" not in status and "0001_roles_and_schemas" in status
    port = free_port()
    log = open(elsewhere / "serve.log", "wb")
    # The gateway logs in as shell_authenticator, as PostgREST does (it
    # refuses a superuser: row-level security would not hold).
    serve_env = {**env, "PG_SHELL_GATEWAY_DATABASE_URL": authenticator_dsn(empty_db),
                 "PG_SHELL_GATEWAY_METRICS_PORT": "0"}
    proc = subprocess.Popen([str(installed / "pg-shell"), "serve", "--port", str(port)],
                            cwd=elsewhere, env=serve_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            page = wait_for("the UI", lambda: fetch(f"http://127.0.0.1:{port}/"), timeout=60)
        except AssertionError as exc:
            raise AssertionError((elsewhere / "serve.log").read_text()[-2000:]) from exc
        assert page == (REPO / "html" / "index.html").read_bytes()
    finally:
        proc.terminate()
        proc.wait(30)


def fetch(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bytes(response.read())
    except OSError:
        return None


def test_the_installed_executor_runs_a_command(installed: Path, empty_db: str, elsewhere: Path,
                                              executor_env: dict[str, str],
                                              docker_client: Any) -> None:
    env = {**executor_env, "DATABASE_URL": empty_db,
           "PG_SHELL_SCOPE": psycopg2.extensions.parse_dsn(empty_db)["dbname"]}
    run([str(installed / "pg-shell"), "db", "migrate"], cwd=elsewhere, env=env)
    log_path = elsewhere / "executor.log"
    proc = subprocess.Popen([str(installed / "pg-shell"), "executor"], cwd=elsewhere, env=env,
                            stdout=open(log_path, "wb"), stderr=subprocess.STDOUT)
    try:
        conn = tenant(empty_db, create_user(empty_db, "wheel"))
        session = one(conn, "SELECT shell_api.create_session('wheel')")
        command = one(conn, "SELECT shell_api.submit_command(%s, 'echo installed; pwd')",
                      (session,))

        def finished() -> dict[str, Any] | None:
            assert proc.poll() is None, log_path.read_text()[-4000:]
            rows = call(conn, "SELECT * FROM shell_api.latest_output(%s)", (session,))
            row = next(r for r in rows if r["id"] == command)
            return row if row["status"] in ("done", "failed") else None

        row = wait_for("the command", finished, timeout=120)
        assert (row["status"], row["exit_code"], row["output"]) == (
            "done", 0, "installed\n/home/sandbox\n"), log_path.read_text()[-4000:]
        conn.close()
    finally:
        proc.terminate()
        proc.wait(60)
        remove_labelled(docker_client, f"pg-shell.worker-id={env['PG_SHELL_WORKER_ID']}")
        remove_session_volumes(docker_client, env["PG_SHELL_VOLUMES_DIR"])


def test_image_build_from_the_package_gives_the_checkouts_image(
        installed: Path, elsewhere: Path, sandbox_image: str) -> None:
    done = run([str(installed / "pg-shell"), "image", "build"], cwd=elsewhere,
               env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=1200)
    assert done.stdout.splitlines()[-1] == sandbox_image, done.stderr
    assert "already built; nothing to do" in done.stderr
