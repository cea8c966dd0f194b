"""Image rollout fixtures: variants of the sandbox image built for the test
under a test repository (removed afterwards, even after a failure), the
`pg-shell image` CLI as a subprocess, and tenants' sessions."""

from __future__ import annotations

import io
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import docker.errors
import pytest

from tests.engine_cleanup import remove_container

# Re-exported fixtures: the real daemon and a tenant's session.
from tests.executor.conftest import Shell, make_shell, shell  # noqa: F401
from tests.fixtures_stack import REPO, daemon, executor_env, make_daemon  # noqa: F401


class Variants:
    """Images FROM the sandbox image, one LABEL apart, tagged repo:NAME."""

    def __init__(self, client: Any, base: str) -> None:
        self.client = client
        self.base = base
        self.repository = f"pgtest-sandbox-{secrets.token_hex(4)}"

    def build(self, name: str, *lines: str) -> str:
        """The base with a label, then ``lines`` (Dockerfile instructions)."""
        dockerfile = "\n".join([f"FROM {self.base}", f"LABEL pg-shell.test-variant={name}",
                                 *lines, ""])
        # The SDK's build is the classic builder: it never pulls a local base.
        image, _ = self.client.images.build(fileobj=io.BytesIO(dockerfile.encode()),
                                            tag=f"{self.repository}:{name}", rm=True, pull=False)
        return str(image.id)

    def exists(self, digest: str) -> bool:
        try:
            self.client.images.get(digest)
        except docker.errors.ImageNotFound:
            return False
        return True

    def wait_unused(self, digest: str, timeout: float = 180) -> None:
        """Until no container (the executor removes them after the fact) uses it.
        The timeout only proves "it did not hang": removals queue up behind
        everything else a busy engine does."""
        deadline = time.monotonic() + timeout
        while self.client.containers.list(all=True, sparse=True, filters={"ancestor": digest}):
            assert time.monotonic() < deadline, f"containers of {digest} were never removed"
            time.sleep(0.2)

    def remove_all(self) -> None:
        for image in self.client.images.list(name=self.repository):
            for container in self.client.containers.list(all=True, sparse=True,
                                                         filters={"ancestor": image.id}):
                remove_container(self.client, container)
            for tag in image.tags:
                try:
                    self.client.images.remove(tag, force=True)
                except docker.errors.ImageNotFound:
                    pass


@pytest.fixture
def variants(docker_client: Any, sandbox_image: str) -> Iterator[Variants]:
    made = Variants(docker_client, sandbox_image)
    try:
        yield made
    finally:
        made.remove_all()


@pytest.fixture
def image_cli(db: str, sandbox_image: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`pg-shell image ARGS` against the test's database; its result."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    env.update({"DATABASE_URL": db, "PG_SHELL_IMAGE": sandbox_image})

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "executor.cli.main", "image", *args], env=env,
                              cwd=REPO, capture_output=True, text=True, timeout=120)

    return run
