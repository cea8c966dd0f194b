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
# The attacks whose command does not complete under runsc yet: under gVisor's
# kernel the supervisor loses the command's state report after it (a
# /dev/shm filled, a fork bomb, a traced process, 200 exported variables,
# the privilege probes), so the command fails with "the scan of the home did
# not finish" and its files are not saved: it fails closed, but it fails.
# Until that is fixed they run under runc only, and the others under both.
RUNC_ONLY = pytest.mark.parametrize("runtime", ["runc"], indirect=True)


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest, docker_client: Any) -> str:
    name = str(request.param)
    require(name in (docker_client.info().get("Runtimes") or {}),
            f"the {name} runtime registered with the engine (ops/gvisor)")
    return name
