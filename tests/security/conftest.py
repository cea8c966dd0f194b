"""The end-to-end fixtures of tests/executor (the real `pg-shell executor`
daemon against a fresh database, tenant sessions through the SQL API),
shared here without moving them: pytest registers every fixture found in a
conftest module's namespace, imported or not. Every attack here runs under
each container runtime: runc (the host's kernel) and runsc (gVisor's)."""

from typing import Any

import pytest

from tests.conftest import require
from tests.executor.conftest import (  # noqa: F401 - fixtures and helpers re-exported
    TERMINAL,
    Daemon,
    Shell,
    daemon,
    executor_env,
    make_daemon,
    make_shell,
    remove_session_volumes,
    shell,
)

RUNTIMES = ("runc", "runsc")


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest, docker_client: Any) -> str:
    name = str(request.param)
    require(name in (docker_client.info().get("Runtimes") or {}),
            f"the {name} runtime registered with the engine (ops/gvisor)")
    return name


def ok(row: dict) -> dict:
    """``row``, a command that succeeded (else its output says why not)."""
    assert (row["status"], row["exit_code"], row["reason"]) == ("done", 0, None), (
        row["command"], row["output"][-2000:])
    return row
