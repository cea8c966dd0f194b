"""Run one command in a fresh, locked-down container.

Lifecycle: volume → create (stdin open) → attach → start → on_started →
send the command to the supervisor (protocol.py) → stream its frames while
watching the deadline (watch.py) → collect exit status / OOM / state report /
file manifest. Removal is the caller's job
(``remove_container``), after the result is recorded, so it stays off the
critical path.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import docker.errors
from docker.utils.socket import frames_iter

from .engine import ENGINE_ERRORS, connect, engine_error
from .model import Limits, RunRequest, RunResult
from .output import OutputCapper
from .protocol import Conversation, FileReceiver, json_frame
from .spec import (
    LABEL_COMMAND,
    LABEL_SCOPE,
    LABEL_WORKER,
    command_labels,
    container_args,
    host_config_args,
    session_env,
)
from .state import resolve_state
from .volumes import DEFAULT_STATE_DIR, LoopVolumes, PlainVolumes
from .watch import Frames, Watch, pump

if TYPE_CHECKING:
    from executor.config import Settings

log = logging.getLogger(__name__)

EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_OOM = 137  # 128 + SIGKILL, what the shell would show
EXIT_CANCELLED = 130  # 128 + SIGINT: "interrupted by the user"
# How the note under a command's output names why it did not finish.
UNFINISHED_WORDS = {"timeout": "timed out", "cancelled": "cancelled"}

RESTORE_TIMEOUT_S = 600

OnStarted = Callable[[str], None]
OnOutput = Callable[[str], None]


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
        self._client = connect(docker_host)
        self._api = self._client.api
        self.volumes: LoopVolumes | PlainVolumes
        if disk_quota == "loop":
            self.volumes = LoopVolumes(self._client, limits.disk_quota_bytes, volume_dir)
        else:
            self.volumes = PlainVolumes(self._client, volume_dir)

    # -- engine facts --------------------------------------------------------

    def isolation(self) -> str:
        """"rootless", "userns-remap" or "rootful", from docker info."""
        try:
            options = self._client.info().get("SecurityOptions") or []
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, "docker info") from exc
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
            raise engine_error(exc, f"inspect image {image}") from exc

    # -- one command -----------------------------------------------------------

    def run(
        self,
        req: RunRequest,
        on_started: OnStarted,
        on_output: OnOutput,
        cancel: threading.Event,
        on_created: OnStarted = lambda _container_id: None,
        files: FileReceiver | None = None,
    ) -> RunResult:
        """``on_created`` runs after the container exists and before it
        starts (the caller records that it may run); ``on_started`` once it
        runs, before the command is sent. With ``files``, the supervisor
        reports the home's manifest after the command and sends the files
        ``files.wanted`` asks for."""
        volume = self.volumes.volume_for(req.session_id)
        container_id = self._create(req.image, command_labels(req, self.scope), volume)
        try:
            on_created(container_id)
        except BaseException:
            self.remove_container(container_id)
            raise
        sock, raw = self._attach_and_start(container_id)
        started = time.monotonic()
        request = json_frame(b"c", {"command": req.command, "cwd": req.cwd,
                                    "env": session_env(req.env), "capture": files is not None})
        try:
            on_started(container_id)
            conversation = Conversation(OutputCapper(self.limits.output_cap_bytes), files)
            watch = self._supervise(req, container_id, sock, raw, request, started, on_output,
                                    cancel, conversation)
            return self._result(req, container_id, conversation, watch)
        except BaseException:
            # A callback or engine failure: never leave the command running.
            self._kill(container_id)
            raise
        finally:
            _close(raw)

    def restore(self, req: RunRequest, header: dict[str, Any],
                tar: Iterable[bytes]) -> Conversation:
        """Brings the session's volume to a tree, inside a container as
        locked down as a command's (never by extracting tenant data on the
        host): ``header`` says what to delete, ``tar`` carries what to
        write. Returns the conversation, with the manifest of the result."""
        session_id = req.session_id
        volume = self.volumes.volume_for(session_id)
        container_id = self._create(req.image, command_labels(req, self.scope), volume,
                                    command=["restore"])
        try:
            sock, raw = self._attach_and_start(container_id)
            raw.settimeout(RESTORE_TIMEOUT_S)  # a restore that hangs ends as an engine error
            conversation = Conversation(OutputCapper(self.limits.output_cap_bytes))

            def send() -> None:
                try:
                    raw.sendall(json_frame(b"R", header))
                    for chunk in tar:
                        raw.sendall(chunk)
                    raw.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # the container died first; the conversation says why

            threading.Thread(target=send, name=f"restore-{session_id}", daemon=True).start()
            try:
                for stream, data in frames_iter(sock, tty=False):
                    if stream == 1:
                        conversation.feed(data)
            except OSError:
                pass
            finally:
                _close(raw)
            self._api.wait(container_id, timeout=RESTORE_TIMEOUT_S)
            return conversation
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, f"restore session {session_id}", container_id) from exc
        finally:
            self.remove_container(container_id)

    def _attach_and_start(self, container_id: str) -> tuple[Any, socket.socket]:
        raw: socket.socket | None = None
        try:
            sock = self._api.attach_socket(
                container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            raw = sock._sock  # the SocketIO's socket: needed for sendall/shutdown
            raw.settimeout(None)  # a quiet command must not time out the read
            self._api.start(container_id)
            return sock, raw
        except ENGINE_ERRORS as exc:
            if raw is not None:
                raw.close()
            # Never started (or we cannot tell): do not leak it.
            self.remove_container(container_id)
            raise engine_error(exc, "start container", container_id) from exc

    def _create(self, image: str, labels: dict[str, str], volume: str,
                command: list[str] | None = None) -> str:
        try:
            created = self._api.create_container(
                host_config=self._api.create_host_config(
                    **host_config_args(self.limits, self.shell_root, volume,
                                       seed_from_image=self.volumes.seed_from_image)
                ),
                **container_args(image, labels, self.shell_root, command),
            )
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, f"create container for {labels.get(LABEL_COMMAND)}") from exc
        return str(created["Id"])

    def _supervise(
        self,
        req: RunRequest,
        container_id: str,
        sock: Any,
        raw: socket.socket,
        request: bytes,
        started: float,
        on_output: OnOutput,
        cancel: threading.Event,
        conversation: Conversation,
    ) -> Watch:
        # Threads do the blocking parts (stdin, the frame stream, waiting for
        # exit); this thread only reacts, so a cancel or the deadline is
        # noticed within POLL_S even when the command is silent. on_output
        # is called from this (the caller's) thread. A bounded queue gives
        # backpressure: a slow consumer slows the reader, not our memory.
        frames: Frames = queue.Queue(maxsize=64)
        exited = threading.Event()
        stop = threading.Event()  # we gave up: helper threads must not block forever
        exit_status: dict[str, Any] = {}

        def send(data: bytes) -> None:
            try:
                raw.sendall(data)
            except OSError:
                pass  # the container died first; its exit status says why

        def wait_exit() -> None:
            try:
                exit_status.update(self._api.wait(container_id, timeout=None))
            except ENGINE_ERRORS as exc:
                exit_status["error"] = exc
            finally:
                exited.set()

        conversation.reply = send
        threads = ((send, (request,)), (pump, (frames_iter(sock, tty=False), frames, stop)),
                   (wait_exit, ()))
        for target, args in threads:
            threading.Thread(target=target, args=args,
                             name=f"sandbox-{target.__name__}-{req.command_id}",
                             daemon=True).start()
        try:
            watch = Watch(self._kill, self.limits.timeout_s, req, container_id, started, cancel)
            watch.collect(conversation, on_output, frames, exited)
            if "error" in exit_status:
                exc = exit_status["error"]
                raise engine_error(exc, "wait for container", container_id) from exc
            watch.exit_code = int(exit_status.get("StatusCode", -1))
            return watch
        finally:
            stop.set()

    def _result(self, req: RunRequest, container_id: str, conversation: Conversation,
                watch: Watch) -> RunResult:
        reason = watch.reason
        exit_code = watch.exit_code
        if reason is None and conversation.status is not None:
            exit_code = conversation.status  # the shell's, even if capture ended later
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

        if reason in ("timeout", "cancelled") or conversation.status is None:
            # A report may have raced the kill; the command did not finish,
            # so keep the session as it was.
            state = resolve_state(None, False, req.cwd, req.env, self.shell_root)
            state_note = (f"{UNFINISHED_WORDS.get(reason, reason)}, so its cd and export did not "
                          "take effect") if reason else state.note
        else:
            state = resolve_state(conversation.state, conversation.state_overflow, req.cwd, req.env,
                                  self.shell_root)
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
        captured = reason is None and conversation.ended and conversation.manifest_done
        return RunResult(
            exit_code=exit_code,
            reason=reason,
            output_bytes=conversation.capper.total_bytes,
            truncated=conversation.capper.truncated,
            duration_s=watch.duration_s,
            cwd=state.cwd,
            env=state.env,
            state_note=state_note,
            container_id=container_id,
            image_digest=str(info.get("Image") or req.image),
            manifest=conversation.manifest if captured else None,
            skipped=conversation.skipped,
        )

    def _inspect(self, container_id: str) -> dict[str, Any]:
        try:
            return dict(self._api.inspect_container(container_id))
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, "inspect container", container_id) from exc

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
            raise engine_error(exc, "remove container", container_id) from exc
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, "remove container", container_id) from exc

    def command_ids(self, worker_id: str) -> list[int]:
        """Ids of the commands whose containers (running or not) this worker left on the engine."""
        try:
            containers = self._api.containers(
                all=True,
                filters={"label": [f"{LABEL_WORKER}={worker_id}", f"{LABEL_SCOPE}={self.scope}"]}
            )
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, "list containers") from exc
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
            raise engine_error(exc, "list containers") from exc
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


def sandbox_from(settings: Settings) -> Sandbox:
    """The sandbox the settings describe (the executor's, and cleanup's)."""
    return Sandbox(settings.limits(), shell_root=settings.shell_root,
                   docker_host=settings.docker_host, disk_quota=settings.disk_quota,
                   volume_dir=settings.volumes_dir, scope=settings.scope)


def _close(raw: socket.socket) -> None:
    try:
        raw.close()
    except OSError:
        pass
