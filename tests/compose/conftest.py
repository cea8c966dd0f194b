"""The all-in-one deployment (docker-compose.yml) brought up by pytest-docker
with Debian's docker-compose 1.29, under a project name of its own, and torn
down with its volumes — plus the session volumes and sandbox containers its
executor made on the host engine — even when bringing it up failed."""

from __future__ import annotations

import secrets
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import require
from tests.engine_cleanup import remove_labelled
from tests.fixtures_stack import REPO, free_port

PROJECT = f"pgtest{secrets.token_hex(4)}"
PORT = free_port()
ENV = {
    "PG_SHELL_DB_PASSWORD": secrets.token_hex(16),
    "PG_SHELL_AUTHENTICATOR_PASSWORD": secrets.token_hex(16),
    "PG_SHELL_ALLOW_ROOTFUL": "1",  # ops/docker-engine's engine is rootful
    "PG_SHELL_SCOPE": PROJECT,
    "PG_SHELL_WORKER_ID": f"{PROJECT}-executor",
    "PG_SHELL_HTTP_PORT": str(PORT),
}
# The variables travel on the command line, never through os.environ, where
# other tests' settings would pick them up.
COMMAND = "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in ENV.items()) + " docker-compose"


def compose(*args: str, stdin: str | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    argv = ["env", *(f"{k}={v}" for k, v in ENV.items()), "docker-compose", "-f",
            str(REPO / "docker-compose.yml"), "-p", PROJECT, *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    return COMMAND


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    return str(REPO / "docker-compose.yml")


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return PROJECT


@pytest.fixture(scope="session")
def docker_setup(compose_prepared: None) -> list[str]:
    # docker-compose 1.29 has no `up --wait`; the test waits for the gateway.
    return ["up --build -d"]


@pytest.fixture(scope="session")
def docker_cleanup() -> list[str]:
    return ["down -v --remove-orphans"]


@pytest.fixture(scope="session")
def compose_prepared(docker_client: Any) -> None:
    require(shutil.which("docker-compose") is not None, "docker-compose (ops/install-packages)")
    done = subprocess.run([str(REPO / "ops" / "compose" / "prepare")], capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="session")
def compose_guard(docker_client: Any) -> Iterator[list[str]]:
    """Yields a list the test adds its session ids to; afterwards removes
    the project (again: a no-op when pytest-docker did), the sandbox
    containers of its scope and those sessions' volumes."""
    sessions: list[str] = []
    yield sessions
    compose("down", "-v", "--remove-orphans")
    remove_labelled(docker_client, f"pg-shell.scope={PROJECT}")
    for session_id in sessions:
        try:
            docker_client.volumes.get(f"pg-shell-home-{session_id}").remove(force=True)
        except Exception:
            pass


@pytest.fixture(scope="session")
def stack(compose_guard: list[str], docker_services: Any) -> Any:
    """pytest-docker's services, once the gateway answers."""
    import httpx

    def answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{PORT}/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        docker_services.wait_until_responsive(check=answers, timeout=180, pause=0.5)
    except Exception as exc:
        raise AssertionError(
            f"the gateway never answered: {exc}\n{compose('logs', '--tail', '50').stdout}") from exc
    return docker_services
