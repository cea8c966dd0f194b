"""Run one command in a fresh, locked-down container.

Lifecycle: volume → create (stdin open) → attach → start → on_started →
send the command on stdin → stream output while waiting with a deadline →
collect exit status / OOM / state report. Removal is the caller's job
(``remove_container``), after the result is recorded, so it stays off the
critical path.
"""

from __future__ import annotations

import logging
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.utils.socket import frames_iter

from .errors import ContainerFailed, EngineUnavailable, ImageNotFound, SandboxError
from .model import Limits, RunRequest, RunResult
from .output import OutputCapper, StateExtractor
from .spec import LABEL_COMMAND, LABEL_SCOPE, LABEL_WORKER, container_args, host_config_args
from .state import resolve_state
from .volumes import DEFAULT_STATE_DIR, LoopVolumes, PlainVolumes

log = logging.getLogger(__name__)

EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_OOM = 137  # 128 + SIGKILL, what the shell would show
EXIT_CANCELLED = 130  # 128 + SIGINT: "interrupted by the user"

POLL_S = 0.05  # how often cancel/deadline are checked while output is quiet
STREAM_GRACE_S = 2.0  # how long to wait for the output stream after exit
_EOF = object()

OnStarted = Callable[[str], None]
OnOutput = Callable[[str], None]


def _engine_error(exc: Exception, what: str, container_id: str | None = None) -> SandboxError:
    """Map a docker/requests failure onto our exceptions."""
    if isinstance(exc, docker.errors.ImageNotFound):
        return ImageNotFound(f"{what}: {exc}", container_id=container_id)
    if isinstance(exc, docker.errors.APIError) and exc.status_code is not None:
        return ContainerFailed(f"{what}: {exc}", container_id=container_id)
    return EngineUnavailable(f"{what}: {exc}", container_id=container_id)


ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)


class Sandbox:
    def __init__(
        self,
        limits: Limits,
        shell_root: str = "/home/sandbox",
        docker_host: str | None = None,
        disk_quota: str = "loop",  # or "none" (rootless engines: plain volume, no quota)
        volume_dir: str = DEFAULT_STATE_DIR,
        scope: str = "default",  # deployment name; reap() stays inside it
    ) -> None:
        if disk_quota not in ("loop", "none"):
            raise ValueError(f"disk_quota must be 'loop' or 'none', not {disk_quota!r}")
        self.limits = limits
        self.shell_root = shell_root
        self.scope = scope
        try:
            # docker_host None: DOCKER_HOST or the default socket. This is the
            # executor's own config; containers never see os.environ.
            self._client = (
                docker.DockerClient(base_url=docker_host) if docker_host else docker.from_env()
            )
        except docker.errors.DockerException as exc:
            raise EngineUnavailable(str(exc)) from exc
        self._api = self._client.api
        self.volumes: LoopVolumes | PlainVolumes
        if disk_quota == "loop":
            self.volumes = LoopVolumes(self._client, limits.disk_quota_bytes, volume_dir)
        else:
            self.volumes = PlainVolumes(self._client)

    # -- engine facts --------------------------------------------------------

    def isolation(self) -> str:
        """"rootless", "userns-remap" or "rootful", from docker info."""
        try:
            options = self._client.info().get("SecurityOptions") or []
        except ENGINE_ERRORS as exc:
            raise _engine_error(exc, "docker info") from exc
        if any("name=rootless" in o for o in options):
            return "rootless"
        if any("name=userns" in o for o in options):
            return "userns-remap"
        return "rootful"

    def image_digest(self, image: str) -> str:
        """The immutable id (sha256:…) of ``image`` on this engine."""
        try:
            return str(self._api.inspect_image(image)["Id"])
        except ENGINE_ERRORS as exc:
            raise _engine_error(exc, f"inspect image {image}") from exc

    # -- one command -----------------------------------------------------------

    def run(
        self,
        req: RunRequest,
        on_started: OnStarted,
        on_output: OnOutput,
        cancel: threading.Event,
        on_created: OnStarted = lambda _container_id: None,
    ) -> RunResult:
        """``on_created`` runs after the container exists and before it
        starts (the caller records that it may run); ``on_started`` once it
        runs, before the command is sent."""
        nonce = secrets.token_hex(16)
        volume = self.volumes.volume_for(req.session_id)
        container_id = self._create(req, volume, nonce)
        raw: socket.socket | None = None
        try:
            on_created(container_id)
        except BaseException:
            self.remove_container(container_id)
            raise
        try:
            sock = self._api.attach_socket(
                container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            raw = sock._sock  # the SocketIO's socket: needed for sendall/shutdown
            raw.settimeout(None)  # a quiet command must not time out the read
            self._api.start(container_id)
            started = time.monotonic()
        except ENGINE_ERRORS as exc:
            if raw is not None:
                raw.close()
            # Never started (or we cannot tell): do not leak it.
            self.remove_container(container_id)
            raise _engine_error(exc, "start container", container_id) from exc

        try:
            on_started(container_id)
            return self._supervise(req, container_id, sock, raw, nonce, started, on_output, cancel)
        except BaseException:
            # A callback or engine failure: never leave the command running.
            self._kill(container_id)
            raise
        finally:
            try:
                raw.close()
            except OSError:
                pass

    def _create(self, req: RunRequest, volume: str, nonce: str) -> str:
        try:
            created = self._api.create_container(
                host_config=self._api.create_host_config(
                    **host_config_args(self.limits, self.shell_root, volume,
                                       seed_from_image=self.volumes.seed_from_image)
                ),
                **container_args(req, self.shell_root, nonce, self.scope),
            )
        except ENGINE_ERRORS as exc:
            raise _engine_error(exc, f"create container for command {req.command_id}") from exc
        return str(created["Id"])

    def _supervise(
        self,
        req: RunRequest,
        container_id: str,
        sock: Any,
        raw: socket.socket,
        nonce: str,
        started: float,
        on_output: OnOutput,
        cancel: threading.Event,
    ) -> RunResult:
        # Threads do the blocking parts (stdin, the frame stream, waiting for
        # exit); this thread only reacts, so a cancel or the deadline is
        # noticed within POLL_S even when the command is silent. on_output
        # is called from this (the caller's) thread. A bounded queue gives
        # backpressure: a slow consumer slows the reader, not our memory.
        frames: queue.Queue[object] = queue.Queue(maxsize=64)
        exited = threading.Event()
        stop = threading.Event()  # we gave up: helper threads must not block forever
        exit_status: dict[str, Any] = {}

        def write_stdin() -> None:
            try:
                raw.sendall(req.command.encode("utf-8", "surrogateescape"))
                raw.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the container died first; its exit status says why

        def put(item: object) -> bool:
            while not stop.is_set():
                try:
                    frames.put(item, timeout=POLL_S)
                    return True
                except queue.Full:
                    continue
            return False

        def read_frames() -> None:
            try:
                for stream, data in frames_iter(sock, tty=False):
                    if not put((stream, data)):
                        return
            except OSError:
                pass  # the socket was closed under us: we stopped reading
            finally:
                put(_EOF)

        def wait_exit() -> None:
            try:
                exit_status.update(self._api.wait(container_id, timeout=None))
            except ENGINE_ERRORS as exc:
                exit_status["error"] = exc
            finally:
                exited.set()

        for target in (write_stdin, read_frames, wait_exit):
            threading.Thread(
                target=target, name=f"sandbox-{target.__name__}-{req.command_id}", daemon=True
            ).start()
        try:
            return self._collect(
                req, container_id, nonce, started, on_output, cancel, frames, exited, exit_status
            )
        finally:
            stop.set()

    def _collect(
        self,
        req: RunRequest,
        container_id: str,
        nonce: str,
        started: float,
        on_output: OnOutput,
        cancel: threading.Event,
        frames: queue.Queue[object],
        exited: threading.Event,
        exit_status: dict[str, Any],
    ) -> RunResult:
        extractor = StateExtractor(nonce)
        capper = OutputCapper(self.limits.output_cap_bytes)
        deadline = started + self.limits.timeout_s
        reason: str | None = None
        stream_done = False
        exited_at: float | None = None

        while not (stream_done and exited.is_set()):
            if reason is None and cancel.is_set():
                reason = "cancelled"
                self._kill(container_id)
            elif reason is None and time.monotonic() >= deadline:
                reason = "timeout"
                self._kill(container_id)
            if exited.is_set() and exited_at is None:
                exited_at = time.monotonic()
            if exited_at is not None and time.monotonic() - exited_at > STREAM_GRACE_S:
                break  # exited, but something keeps the stream open: stop reading
            if stream_done:
                exited.wait(POLL_S)  # output is over; only the exit is missing
                continue
            try:
                item = frames.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if item is _EOF:
                stream_done = True
                continue
            stream, data = item  # type: ignore[misc]
            text = capper.feed(stream, extractor.feed(data) if stream == 1 else data)
            if text:
                on_output(text)

        tail = capper.feed(1, extractor.finish()) + capper.finish()
        if tail:
            on_output(tail)
        duration = (exited_at or time.monotonic()) - started

        if "error" in exit_status:
            exc = exit_status["error"]
            raise _engine_error(exc, "wait for container", container_id) from exc
        exit_code = int(exit_status.get("StatusCode", -1))
        # Only a death by signal can be the OOM killer (or the engine going
        # away), and only then is the container inspected: it costs a round
        # trip on the critical path.
        killed = (exit_code >= 128 or exit_code < 0) and reason is None
        info = self._inspect(container_id) if killed or not req.image.startswith("sha256:") else {}
        if reason == "timeout":
            exit_code = EXIT_TIMEOUT
        elif reason == "cancelled":
            exit_code = EXIT_CANCELLED
        elif killed and info["State"].get("OOMKilled"):
            reason, exit_code = "oom", EXIT_OOM

        if reason in ("timeout", "cancelled"):
            # A report may have raced the kill; the command did not finish,
            # so keep the session as it was.
            state = resolve_state(None, False, req.cwd, req.env, self.shell_root)
            state_note = f"{reason}: state not updated"
        else:
            state = resolve_state(
                extractor.state_bytes(), extractor.state_overflow, req.cwd, req.env, self.shell_root
            )
            state_note = state.note
        log.info(
            "command finished",
            extra={
                "command_id": req.command_id,
                "session_id": req.session_id,
                "worker_id": req.worker_id,
                "container_id": container_id,
                "exit_code": exit_code,
                "reason": reason,
            },
        )
        return RunResult(
            exit_code=exit_code,
            reason=reason,
            output_bytes=capper.total_bytes,
            truncated=capper.truncated,
            duration_s=duration,
            cwd=state.cwd,
            env=state.env,
            state_note=state_note,
            container_id=container_id,
            image_digest=str(info.get("Image") or req.image),
        )

    def _inspect(self, container_id: str) -> dict[str, Any]:
        try:
            return dict(self._api.inspect_container(container_id))
        except ENGINE_ERRORS as exc:
            raise _engine_error(exc, "inspect container", container_id) from exc

    def _kill(self, container_id: str) -> None:
        try:
            self._api.kill(container_id)
        except docker.errors.APIError as exc:
            # 409/404: it already stopped or is gone, which is what we wanted.
            if exc.status_code not in (404, 409):
                log.warning("kill %s failed: %s", container_id, exc)
        except ENGINE_ERRORS as exc:
            log.warning("kill %s failed: %s", container_id, exc)

    # -- clean-up ----------------------------------------------------------------

    def remove_container(self, container_id: str) -> None:
        """Force-remove a command's container (never its volume)."""
        try:
            self._api.remove_container(container_id, force=True, v=False)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code == 409 and "already in progress" in str(exc.explanation):
                return  # someone else is removing it: the outcome we want
            raise _engine_error(exc, "remove container", container_id) from exc
        except ENGINE_ERRORS as exc:
            raise _engine_error(exc, "remove container", container_id) from exc

    def command_ids(self, worker_id: str) -> list[int]:
        """Ids of the commands whose containers (running or not) this worker left on the engine."""
        try:
            containers = self._api.containers(
                all=True, filters={"label": [f"{LABEL_WORKER}={worker_id}", f"{LABEL_SCOPE}={self.scope}"]}
            )
        except ENGINE_ERRORS as exc:
            raise _engine_error(exc, "list containers") from exc
        labels = ((c.get("Labels") or {}).get(LABEL_COMMAND, "") for c in containers)
        return [int(label) for label in labels if label.isdigit()]

    def reap(self, keep: Callable[[int], bool]) -> list[str]:
        """Remove this scope's containers whose command id ``keep`` rejects.

        Labels are the only link between a container and its command, so a
        container without a parseable id is removed as well.
        """
        try:
            containers = self._api.containers(
                all=True, filters={"label": [LABEL_COMMAND, f"{LABEL_SCOPE}={self.scope}"]}
            )
        except ENGINE_ERRORS as exc:
            raise _engine_error(exc, "list containers") from exc
        removed: list[str] = []
        for c in containers:
            label = (c.get("Labels") or {}).get(LABEL_COMMAND, "")
            try:
                if keep(int(label)):
                    continue
            except ValueError:
                pass
            self.remove_container(c["Id"])
            removed.append(str(c["Id"]))
        return removed
