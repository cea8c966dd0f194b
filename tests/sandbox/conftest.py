"""Fixtures for the sandbox tests: a real Docker engine and the real image.

No engine → the tests skip locally, but under CI=true they fail: CI must
never go green by skipping the security tests. Everything the tests create
carries the per-run prefix (worker id label, session ids, volume names) and
is removed at the end of the run, failures included.
"""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from executor.sandbox import Limits, RunRequest, RunResult, Sandbox
from executor.sandbox.spec import LABEL_WORKER
from executor.sandbox.volumes import SESSION_LABEL
from tests.conftest import require

REPO = Path(__file__).resolve().parents[2]
PREFIX = f"pgtest-{secrets.token_hex(4)}"  # worker id, session ids, volume names
SHELL_ROOT = "/home/sandbox"
_command_ids = itertools.count(9_000_000_000 + secrets.randbelow(10**8) * 1000)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env()
        client.ping()
    except Exception:  # any failure to talk to the engine
        client = None
    require(client is not None, "a Docker engine")
    yield client
    _cleanup(client)
    client.close()


def _cleanup(client: docker.DockerClient) -> None:
    # Each step is best-effort and independent: one failure (say, a container
    # another process is already removing) must not leave volumes or loop
    # devices behind.
    for c in client.containers.list(all=True, filters={"label": f"{LABEL_WORKER}={PREFIX}"}):
        _quietly(lambda c=c: c.remove(force=True))
    for v in client.volumes.list(filters={"label": SESSION_LABEL}):
        if v.name.startswith(f"pg-shell-home-{PREFIX}"):
            _quietly(lambda v=v: v.remove(force=True))
    for state_dir in _state_dirs:
        # Blank copies' volumes (test_blank_copies.py): named after their
        # image, or, once a session took the image, in its marker.
        blanks = [image.stem for image in Path(state_dir).glob("pg-shell-blank-*.ext4")]
        blanks += [marker.read_text() for marker in Path(state_dir).glob("*.blank")]
        for name in blanks:
            _quietly(lambda name=name: client.volumes.get(name).remove(force=True))
        for image in Path(state_dir).glob("*.ext4"):
            out = subprocess.run(
                ["losetup", "-n", "-O", "NAME", "-j", str(image)],
                capture_output=True, text=True, check=False,
            ).stdout.split()
            for loop in out:
                subprocess.run(["losetup", "-d", loop], check=False)
        shutil.rmtree(state_dir, ignore_errors=True)


def _quietly(step: Callable[[], object]) -> None:
    try:
        step()
    except docker.errors.APIError:
        pass


_state_dirs: list[str] = []


@pytest.fixture(scope="session")
def image(sandbox_image: str) -> str:
    return sandbox_image


def _quota_mode() -> str:
    # Loop-backed quotas need root on the host (losetup, mkfs).
    return "loop" if os.geteuid() == 0 else "none"


@pytest.fixture(scope="session")
def make_sandbox(docker_client: docker.DockerClient) -> Callable[..., Sandbox]:
    def make(disk_quota: str | None = None, copies_per_user: int = 0,
             **limits: float) -> Sandbox:
        state_dir = tempfile.mkdtemp(prefix=f"{PREFIX}-vol-", dir="/var/tmp")
        _state_dirs.append(state_dir)
        base = {"timeout_s": 20.0, "disk_quota_bytes": 64 * 1024 * 1024}
        return Sandbox(
            Limits(**{**base, **limits}),  # type: ignore[arg-type]
            shell_root=SHELL_ROOT,
            disk_quota=disk_quota or _quota_mode(),
            volume_dir=state_dir,
            scope=PREFIX,  # so other executors on this engine never reap ours
            copies_per_user=copies_per_user,
        )

    return make


@pytest.fixture(scope="session")
def sandbox(make_sandbox: Callable[..., Sandbox]) -> Sandbox:
    return make_sandbox()


@pytest.fixture
def session_id() -> str:
    return f"{PREFIX}-{secrets.token_hex(4)}"


class NoFiles:
    """A file receiver that asks for nothing: the run still reports its manifest."""

    max_entries: int | None = None
    expected_bytes = 0

    def __init__(self, known: dict[str, str] | None = None,
                 changed: dict[str, Any] | None = None) -> None:
        self.known = known or {}  # what the scan may send as unchanged
        self.changed = changed  # {"changed": [...], "held": {...}}: only those are scanned
        self.manifests: list[list[Any]] = []
        self.reports: list[Any] = []  # each scan's ScanReport

    def scan(self) -> dict[str, Any]:
        return {"known": self.known, **(self.changed or {})}

    def wanted(self, manifest: list[Any], scan: Any) -> list[str]:
        self.manifests.append(list(manifest))
        self.reports.append(scan)
        return []

    def begin(self, path: str) -> None: ...
    def data(self, chunk: bytes) -> None: ...
    def end(self, ok: bool, error: str | None) -> None: ...


@dataclass
class Ran:
    result: RunResult
    output: str
    started: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


@pytest.fixture
def run(
    sandbox: Sandbox, image: str, session_id: str, docker_client: docker.DockerClient
) -> Callable[..., Ran]:
    """run("cmd", cwd=…, env=…) → Ran; removes the container unless keep=True."""

    def _run(
        command: str,
        *,
        cwd: str = SHELL_ROOT,
        env: dict[str, str] | None = None,
        box: Sandbox | None = None,
        session: str | None = None,
        cancel: threading.Event | None = None,
        on_started: Callable[[str], None] | None = None,
        keep: bool = False,
        command_id: int | None = None,
        files: Any = None,
    ) -> Ran:
        pieces: list[str] = []
        started: list[str] = []

        def _started(cid: str) -> None:
            started.append(cid)
            if on_started:
                on_started(cid)

        req = RunRequest(
            command_id=command_id if command_id is not None else next(_command_ids),
            session_id=session or session_id,
            worker_id=PREFIX,
            command=command,
            cwd=cwd,
            env=env if env is not None else {},
            image=image,
        )
        t0 = time.monotonic()
        result = (box or sandbox).run(req, _started, pieces.append, cancel or threading.Event(),
                                      files=files)
        elapsed = time.monotonic() - t0
        if not keep:
            (box or sandbox).remove_container(result.container_id)
        return Ran(result, "".join(pieces), started, elapsed)

    return _run
