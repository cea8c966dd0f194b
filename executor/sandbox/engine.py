"""The Docker engine as this package meets it: one way to connect, one
mapping of its failures onto our exceptions (as executor/db/connection.py
maps PostgreSQL's)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import docker
import docker.errors
import requests.exceptions

from .errors import ContainerFailed, EngineUnavailable, ImageNotFound, SandboxError

# An engine that went away (its socket is missing while dockerd restarts)
# raises requests' errors, not docker's: both mean "unreachable, retry".
ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)


def connect(docker_host: str | None) -> docker.DockerClient:
    """A client of ``docker_host``, or of DOCKER_HOST / the default socket.
    This is the executor's own configuration; containers never see it."""
    try:
        return docker.DockerClient(base_url=docker_host) if docker_host else docker.from_env()
    except docker.errors.DockerException as exc:
        raise EngineUnavailable(str(exc)) from exc


def engine_error(exc: Exception, what: str, container_id: str | None = None) -> SandboxError:
    """Map a docker/requests failure onto our exceptions."""
    if isinstance(exc, docker.errors.ImageNotFound):
        return ImageNotFound(f"{what}: {exc}", container_id=container_id)
    if isinstance(exc, docker.errors.APIError) and exc.status_code is not None:
        return ContainerFailed(f"{what}: {exc}", container_id=container_id)
    return EngineUnavailable(f"{what}: {exc}", container_id=container_id)


@contextlib.contextmanager
def engine_errors(what: str, *, refused: type[SandboxError] = ContainerFailed) -> Iterator[None]:
    """Engine calls inside raise our exceptions: ``refused`` when the engine
    answered with an error, EngineUnavailable when it did not answer."""
    try:
        yield
    except ENGINE_ERRORS as exc:
        mapped = engine_error(exc, what)
        if isinstance(mapped, ContainerFailed):
            mapped = refused(f"{what}: {exc}")
        raise mapped from exc
