"""The engine's containers as the sandbox uses them: create one with the
hardening and limits of spec.py, attach to its stdin and stdout and start
it, kill, inspect, remove, and find those of a worker or a scope by label."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors

from .engine import ENGINE_ERRORS, engine_error
from .errors import SandboxError
from .model import Limits
from .spec import (
    LABEL_COMMAND,
    LABEL_SCOPE,
    LABEL_SESSION,
    container_args,
    host_config_args,
)

log = logging.getLogger(__name__)


@dataclass
class Started:
    """A running container we are attached to: its supervisor waits on
    stdin for the request that says what to do."""

    container_id: str
    sock: Any  # the attach stream (frames on stdout)
    raw: socket.socket  # the same connection, for sendall/shutdown
    session_id: str
    image: str
    runtime: str
    at: float = field(default_factory=time.monotonic)
    # Set once the engine says it exited (while a command runs in it).
    exited: threading.Event = field(default_factory=threading.Event)

    def end_input(self) -> None:
        """Half-closes the attach stream: the supervisor reads the end of its
        stdin (a close would not reach it while the stream's reader holds the
        connection too)."""
        try:
            self.raw.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # gone already

    def close(self) -> None:
        try:
            self.raw.close()
        except OSError:
            pass  # already closed with the container: nothing to release


class Containers:
    def __init__(self, client: docker.DockerClient, limits: Limits, shell_root: str,
                 seed_from_image: bool, scope: str) -> None:
        self._api = client.api
        self._limits = limits
        self._shell_root = shell_root
        self._seed_from_image = seed_from_image
        self.scope = scope

    def start(self, image: str, runtime: str, labels: dict[str, str], volume: str,
              session_id: str, on_created: Callable[[str], None] = lambda _container_id: None,
              command: list[str] | None = None) -> Started:
        """Creates, attaches and starts a container under ``runtime``.
        ``on_created`` runs before the start (the caller records that it may
        run); if it fails, the container is removed."""
        container_id = self._create(image, runtime, labels, volume, command)
        try:
            on_created(container_id)
        except BaseException:
            self.remove(container_id)
            raise
        raw: socket.socket | None = None
        try:
            sock = self._api.attach_socket(
                container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            raw = sock._sock  # the SocketIO's socket: needed for sendall/shutdown
            raw.settimeout(None)  # a quiet command must not time out the read
            self._api.start(container_id)
            return Started(container_id, sock, raw, session_id, image, runtime)
        except ENGINE_ERRORS as exc:
            if raw is not None:
                raw.close()
            # Never started (or we cannot tell): do not leak it.
            self.remove(container_id)
            raise engine_error(exc, "start container", container_id) from exc

    def _create(self, image: str, runtime: str, labels: dict[str, str], volume: str,
                command: list[str] | None) -> str:
        try:
            created = self._api.create_container(
                host_config=self._api.create_host_config(
                    **host_config_args(self._limits, self._shell_root, volume, runtime,
                                       seed_from_image=self._seed_from_image)
                ),
                **container_args(image, labels, self._shell_root, command),
            )
        except ENGINE_ERRORS as exc:
            what = labels.get(LABEL_COMMAND) or f"a warm one of {labels.get(LABEL_SESSION)}"
            raise engine_error(exc, f"create container for {what}") from exc
        return str(created["Id"])

    def running(self, container_id: str) -> bool:
        """Whether the container still runs (a warm one may have been killed,
        or its engine restarted, while it waited)."""
        try:
            return bool(self.inspect(container_id)["State"].get("Running"))
        except (KeyError, SandboxError):
            return False

    def inspect(self, container_id: str) -> dict[str, Any]:
        try:
            return dict(self._api.inspect_container(container_id))
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, "inspect container", container_id) from exc

    def wait(self, container_id: str, timeout: int | None) -> dict[str, Any]:
        return dict(self._api.wait(container_id, timeout=timeout))

    def kill(self, container_id: str) -> None:
        try:
            self._api.kill(container_id)
        except docker.errors.APIError as exc:
            # 409/404: it already stopped or is gone, which is what we wanted.
            if exc.status_code not in (404, 409):
                log.warning("kill %s failed: %s", container_id, exc)
        except ENGINE_ERRORS as exc:
            log.warning("kill %s failed: %s", container_id, exc)

    def remove(self, container_id: str) -> None:
        """Force-remove a container (never its volume)."""
        try:
            self._api.remove_container(container_id, force=True, v=False)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code == 409 and "already in progress" in str(exc.explanation):
                return  # someone else is removing it: the outcome we want
            raise engine_error(exc, "remove container", container_id) from exc
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, "remove container", container_id) from exc

    def listed(self, *labels: str) -> list[dict[str, Any]]:
        """This scope's containers (running or not) that carry ``labels``
        (``name`` or ``name=value``)."""
        try:
            return list(self._api.containers(
                all=True, filters={"label": [*labels, f"{LABEL_SCOPE}={self.scope}"]}))
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, "list containers") from exc
