"""Run one command in a locked-down container that runs nothing else.

Lifecycle: volume → create (stdin open) → attach → start (containers.py),
either now or ahead of time (a warm container) → on_created → on_started →
send the command to the supervisor (protocol.py) → stream its frames while
watching the deadline (watch.py) → collect exit status / OOM / state report /
file manifest. Removal is the caller's job (``remove_container``), after the
result is recorded, so it stays off the critical path.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from docker.utils.socket import frames_iter

from .blank_copies import BlankCopy
from .containers import Containers, Started
from .engine import ENGINE_ERRORS, connect, engine_error
from .errors import SandboxError, VolumeError
from .model import Interaction, Limits, RunRequest, RunResult
from .output import OutputCapper
from .ownership import ABANDONED_AFTER_S, abandoned
from .protocol import (
    Conversation,
    FileReceiver,
    InputFeed,
    ProtocolError,
    json_frame,
    stop_frame,
)
from .spec import LABEL_COMMAND, LABEL_WARM, LABEL_WORKER, command_labels, session_env, warm_labels
from .state import resolve_state
from .volumes import DEFAULT_STATE_DIR, LoopVolumes, PlainVolumes
from .watch import Frames, Watch, exit_needed, pump

log = logging.getLogger(__name__)

EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_OOM = 137  # 128 + SIGKILL, what the shell would show
EXIT_CANCELLED = 130  # 128 + SIGINT: "interrupted by the user"
# How the note under a command's output names why it did not finish.
UNFINISHED_WORDS = {"timeout": "timed out", "idle": "ended for being idle",
                    "cancelled": "cancelled"}

RESTORE_TIMEOUT_S = 600
# How long a container whose command ended gets to exit on its own once its
# stdin is closed, before it is removed all the same (killed).
LINGERING_EXIT_S = 5.0
# A restore's archive goes out in writes of about this size: its headers
# and small files one by one would cost a system call (and a wake-up of the
# engine's copy) each.
RESTORE_WRITE_BYTES = 256 * 1024

OnStarted = Callable[[str], None]
OnOutput = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Blank:
    """A container started on a blank copy for a session to come."""

    started: Started
    copy: BlankCopy


class Sandbox:
    def __init__(
        self,
        limits: Limits,
        shell_root: str = "/home/sandbox",
        docker_host: str | None = None,
        disk_quota: str = "loop",  # or "none" (rootless engines: plain volume, no quota)
        volume_dir: str = DEFAULT_STATE_DIR,
        scope: str = "default",  # deployment name; reap() stays inside it
        copies_per_user: int = 0,  # copies of one user's sessions' files on this host (0: any)
        min_free_bytes: int = 0,  # no new loop image below this much free space
        runtime: str = "runc",  # the container runtime of a request that names none
    ) -> None:
        if disk_quota not in ("loop", "none"):
            raise ValueError(f"disk_quota must be 'loop' or 'none', not {disk_quota!r}")
        self.limits = limits
        self.shell_root = shell_root
        self.scope = scope
        self.runtime = runtime
        self._client = connect(docker_host)
        self._api = self._client.api
        self.volumes: LoopVolumes | PlainVolumes
        if disk_quota == "loop":
            self.volumes = LoopVolumes(self._client, limits.disk_quota_bytes, volume_dir,
                                       copies_per_user, min_free_bytes)
        else:
            self.volumes = PlainVolumes(self._client, volume_dir, copies_per_user)
        self.containers = Containers(self._client, limits, shell_root,
                                     self.volumes.seed_from_image, scope)
        # Called with the session id and the runtime once a container of the
        # session is started, before a command is handed to it (its home is mounted).
        self.on_mounted: Callable[[str, str], None] = lambda _session_id, _runtime: None
        # Containers whose command ended, still attached: their supervisor
        # exits when we close its stdin (let_exit, remove_container).
        self._lingering: dict[str, Started] = {}
        self._lingering_lock = threading.Lock()

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

    def runtimes(self) -> set[str]:
        """The container runtimes the engine has registered (docker info)."""
        try:
            return set(self._client.info().get("Runtimes") or ())
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, "docker info") from exc

    def image_digest(self, image: str) -> str:
        """The immutable id (sha256:…) of ``image`` on this engine."""
        try:
            return str(self._api.inspect_image(image)["Id"])
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, f"inspect image {image}") from exc

    # -- warm containers --------------------------------------------------------

    def warm(self, session_id: str, worker_id: str, image: str,
             runtime: str | None = None) -> Started:
        """A session's next container, started before its command exists:
        home mounted, hardening and limits as for any command, the
        supervisor waiting on stdin. Used by at most one ``run``, of the
        same image and runtime."""
        volume = self.volumes.volume_for(session_id, image)
        started = self.containers.start(image, runtime or self.runtime,
                                        warm_labels(session_id, worker_id, self.scope),
                                        volume, session_id)
        self.on_mounted(session_id, runtime or self.runtime)
        return started

    def usable(self, warm: Started) -> bool:
        """Whether a warm container still waits (not killed, its engine not
        restarted): only then may a command be handed to it."""
        return warm.raw.fileno() != -1 and self.containers.running(warm.container_id)

    def discard(self, warm: Started) -> None:
        """Removes a warm container that will not be used."""
        warm.close()
        try:
            self.containers.remove(warm.container_id)
        except SandboxError as exc:
            log.warning("warm container %s not removed (the reaper will): %s",
                        warm.container_id[:12], exc)

    # -- blank containers (blank_copies.py) -------------------------------------

    @property
    def has_blank_copies(self) -> bool:
        """Whether ``blank`` works here: loop volumes only (a plain volume
        cannot be handed to a session under its name)."""
        return isinstance(self.volumes, LoopVolumes)

    def blank(self, worker_id: str, image: str) -> Blank:
        """A container on ``image`` under the default runtime, started on a
        blank copy before any session wants it, as a warm one would be."""
        volumes = self._loop_volumes()
        copy = volumes.blank_copy()
        try:
            started = self.containers.start(image, self.runtime,
                                            warm_labels("", worker_id, self.scope),
                                            copy.volume, "")
        except BaseException:
            volumes.drop_blank(copy)
            raise
        return Blank(started, copy)

    def adopt_blank(self, blank: Blank, session_id: str) -> Started | None:
        """The blank container as the session's warm one, its copy the
        session's, or None if the session has a copy here already (then the
        blank stays as it was)."""
        if not self._loop_volumes().adopt_blank(blank.copy, session_id):
            return None
        # Its wait for a command (the warm pool's idle time) starts now.
        started = dataclasses.replace(blank.started, session_id=session_id, at=time.monotonic())
        self.on_mounted(session_id, started.runtime)
        return started

    def discard_blank(self, blank: Blank) -> None:
        """Removes a blank container no session took, and its copy."""
        self.discard(blank.started)
        self._loop_volumes().drop_blank(blank.copy)

    def sweep_blank_copies(self) -> None:
        """On shutdown, once every container of this executor is gone: the
        blank volumes of the copies sessions took."""
        if self.has_blank_copies:
            self._loop_volumes().sweep_blanks()

    def _loop_volumes(self) -> LoopVolumes:
        if not isinstance(self.volumes, LoopVolumes):
            raise VolumeError("blank copies need loop volumes")
        return self.volumes

    # -- one command -----------------------------------------------------------

    def start(self, req: RunRequest,
              on_created: OnStarted = lambda _container_id: None) -> Started:
        """A container of ``req``'s own, started and waiting for its
        command (``run`` takes it as ``warm``). ``on_created`` runs before
        the start."""
        volume = self.volumes.volume_for(req.session_id, req.image)
        started = self.containers.start(req.image, req.runtime or self.runtime,
                                        command_labels(req, self.scope), volume,
                                        req.session_id, on_created)
        self.on_mounted(req.session_id, req.runtime or self.runtime)
        return started

    def run(
        self,
        req: RunRequest,
        on_started: OnStarted,
        on_output: OnOutput,
        cancel: threading.Event,
        on_created: OnStarted = lambda _container_id: None,
        files: FileReceiver | None = None,
        warm: Started | None = None,
        feed: InputFeed | None = None,
    ) -> RunResult:
        """``on_created`` runs after a new container exists and before it
        starts (the caller records that the command may run); ``on_started``
        once it runs, before the command is sent. ``warm``: a container of
        ``warm()`` for this session, or of ``start(req)``, used instead of a
        new one: it runs already, so ``on_started`` alone records it.
        With ``files``, the supervisor reports the home's manifest after the
        command and sends the files ``files.wanted`` asks for. ``feed``
        gives the input of a command with ``req.interaction``."""
        started = self.start(req, on_created) if warm is None else warm
        request = json_frame(b"c", {"command": req.command, "cwd": req.cwd,
                                    "env": {**session_env(req.env), **req.secrets},
                                    "capture": files is not None,
                                    "max_entries": files.max_entries if files else None,
                                    # What to walk is asked for (n) once the
                                    # command ended: only then is it known.
                                    "known": {}, "ask": files is not None,
                                    **_interaction_fields(req.interaction)})
        cap = (self.limits.terminal_output_cap_bytes if req.interaction and req.interaction.tty
               else self.limits.output_cap_bytes)
        lingers = False
        try:
            on_started(started.container_id)
            conversation = Conversation(OutputCapper(cap), files,
                                        inputs=feed if req.interaction else None)
            watch = self._supervise(req, started, request, on_output, cancel, conversation)
            result = self._result(req, started.container_id, conversation, watch)
            # Ended as it should, the exit not waited for: the supervisor
            # waits for our end of stdin.
            lingers = (conversation.ended and watch.reason is None
                       and not exit_needed(conversation))
            return result
        except BaseException:
            # A callback or engine failure: never leave the command running.
            self.containers.kill(started.container_id)
            raise
        finally:
            if lingers:  # its supervisor waits for our end of stdin (remove_container)
                with self._lingering_lock:
                    self._lingering[started.container_id] = started
            else:
                started.close()

    def restore(self, req: RunRequest, header: dict[str, Any],
                tar: Iterable[bytes]) -> Conversation:
        """Brings the session's volume to a tree, inside a container as
        locked down as a command's (never by extracting tenant data on the
        host): ``header`` says what to delete, ``tar`` carries what to
        write. Returns the conversation, with the manifest of the result."""
        session_id = req.session_id
        volume = self.volumes.volume_for(session_id, req.image)
        started = self.containers.start(req.image, req.runtime or self.runtime,
                                        command_labels(req, self.scope), volume, session_id,
                                        command=["restore"])
        self.on_mounted(session_id, req.runtime or self.runtime)
        raw = started.raw
        try:
            raw.settimeout(RESTORE_TIMEOUT_S)  # a restore that hangs ends as an engine error
            conversation = Conversation(OutputCapper(self.limits.output_cap_bytes))

            def send() -> None:
                try:
                    raw.sendall(json_frame(b"R", header))
                    pending = bytearray()
                    for chunk in tar:
                        pending += chunk
                        if len(pending) >= RESTORE_WRITE_BYTES:
                            raw.sendall(pending)
                            pending.clear()
                    raw.sendall(pending)
                    raw.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # the container died first; the conversation says why

            threading.Thread(target=send, name=f"restore-{session_id}", daemon=True).start()
            try:
                for stream, data in frames_iter(started.sock, tty=False):
                    if stream == 1:
                        conversation.feed(data)
            except OSError:
                pass
            except ProtocolError as exc:
                # The copy is not known to hold the root: a failed restore,
                # which fails the command with this reason (never a crash
                # that would hand the command back to be tried again).
                log.warning("restore of session %s: %s", session_id, exc)
                conversation.restored = False
                conversation.restore_error = f"the sandbox broke the protocol ({exc})"
                self.containers.kill(started.container_id)
            finally:
                started.close()
            self.containers.wait(started.container_id, timeout=RESTORE_TIMEOUT_S)
            return conversation
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, f"restore session {session_id}", started.container_id) from exc
        finally:
            self.remove_container(started.container_id)

    def _supervise(self, req: RunRequest, started: Started, request: bytes,
                   on_output: OnOutput, cancel: threading.Event,
                   conversation: Conversation) -> Watch:
        # Threads do the blocking parts (stdin, the frame stream, waiting for
        # exit); this thread only reacts, so a cancel or the deadline is
        # noticed within POLL_S even when the command is silent. on_output
        # is called from this (the caller's) thread. A bounded queue gives
        # backpressure: a slow consumer slows the reader, not our memory.
        frames: Frames = queue.Queue(maxsize=64)
        exited = started.exited
        stop = threading.Event()  # we gave up: helper threads must not block forever
        exit_status: dict[str, Any] = {}
        container_id = started.container_id

        sending = threading.Lock()  # the request, then input, then the files asked for

        def send(data: bytes) -> None:
            with sending:
                try:
                    started.raw.sendall(data)
                except OSError:
                    pass  # the container died first; its exit status says why

        def end_input() -> None:
            with sending:
                started.end_input()

        def hand_over(data: bytes) -> None:
            send(data)
            if conversation.inputs is not None:
                conversation.inputs.start(send)

        def wait_exit() -> None:
            try:
                exit_status.update(self.containers.wait(container_id, timeout=None))
            except ENGINE_ERRORS as exc:
                exit_status["error"] = exc
            finally:
                exited.set()

        conversation.reply = send
        # The time limit runs from the hand-over: a warm container may have
        # waited long before its command came.
        handed_over = time.monotonic()
        threads = ((hand_over, (request,)),
                   (pump, (frames_iter(started.sock, tty=False), frames, stop)), (wait_exit, ()))
        for target, args in threads:
            threading.Thread(target=target, args=args,
                             name=f"sandbox-{target.__name__}-{req.command_id}",
                             daemon=True).start()
        try:
            feed = conversation.inputs
            watch = Watch(self.containers.kill, self.limits, req, container_id, handed_over,
                          cancel, feed.last_input if feed else lambda: 0.0,
                          stop=lambda _container_id: send(stop_frame()), end_input=end_input)
            try:
                watch.collect(conversation, on_output, frames, exited)
            finally:
                if feed is not None:
                    feed.stop()
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
        # Only a death by signal can be the OOM killer (or the engine going away).
        killed = (exit_code >= 128 or exit_code < 0) and reason is None
        if reason in ("timeout", "idle"):
            exit_code = EXIT_TIMEOUT
        elif reason == "cancelled":
            exit_code = EXIT_CANCELLED
        elif killed and self._oom_killed(conversation, container_id):
            reason, exit_code = "oom", EXIT_OOM

        if reason in UNFINISHED_WORDS or conversation.status is None:
            # A report may have raced the kill; the command did not finish,
            # so keep the session as it was.
            state = resolve_state(None, False, req.cwd, req.env, self.shell_root)
            state_note = (f"{UNFINISHED_WORDS.get(reason, reason)}, so its cd and export did not "
                          "take effect") if reason else state.note
        else:
            state = resolve_state(conversation.state, conversation.state_overflow, req.cwd, req.env,
                                  self.shell_root, hidden=req.secrets.keys())
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
        # A command stopped at a limit or cancelled saved its files too,
        # unless its container had to be killed (then it never said it ended).
        captured = conversation.ended and conversation.manifest_done
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
            manifest=conversation.manifest if captured else None,
            skipped=conversation.skipped,
            skipped_more=conversation.scan.skipped_more,
            capture_note=watch.capture_failure,
        )

    def _oom_killed(self, conversation: Conversation, container_id: str) -> bool:
        """The supervisor's count of OOM kills when it sent one; else the
        engine's flag (a round trip, and set by an event that may still be on
        its way: only for a container whose supervisor could not count)."""
        if conversation.oom is not None:
            return conversation.oom
        return bool(self.containers.inspect(container_id)["State"].get("OOMKilled"))

    # -- clean-up ----------------------------------------------------------------

    def let_exit(self, container_id: str) -> None:
        """Ends the stdin of a container whose command ended, so that its
        supervisor exits (before ``remove_container``, which waits for it)."""
        with self._lingering_lock:
            lingering = self._lingering.get(container_id)
        if lingering is not None:
            lingering.end_input()

    def remove_container(self, container_id: str) -> None:
        """Remove a command's container, killed if it still runs (never its
        volume); one whose command ended is given its exit first."""
        with self._lingering_lock:
            lingering = self._lingering.pop(container_id, None)
        if lingering is not None:
            lingering.end_input()
            # Removed while it runs, it would be killed: the engine then
            # starts the runtime once more (a `runc kill`, ~10 ms of CPU).
            lingering.exited.wait(LINGERING_EXIT_S)
            lingering.close()
        self.containers.remove(container_id)

    def command_ids(self, worker_id: str) -> list[int]:
        """Ids of the commands whose containers (running or not) this worker left on the engine."""
        containers = self.containers.listed(f"{LABEL_WORKER}={worker_id}")
        labels = ((c.get("Labels") or {}).get(LABEL_COMMAND, "") for c in containers)
        return [int(label) for label in labels if label.isdigit()]

    def reap(self, keep: Callable[[int], bool]) -> list[str]:
        """Remove this scope's command containers whose command id ``keep`` rejects.

        Labels are the only link between a container and its command, so a
        container without a parseable id is removed as well.
        """
        removed: list[str] = []
        for c in self.containers.listed(LABEL_COMMAND):
            label = (c.get("Labels") or {}).get(LABEL_COMMAND, "")
            try:
                if keep(int(label)):
                    continue
            except ValueError:
                pass
            self.remove_container(c["Id"])
            removed.append(str(c["Id"]))
        return removed

    def reap_hand_overs(self, older_than_s: float = ABANDONED_AFTER_S) -> list[str]:
        """Remove the hand-over containers (ownership.py) of executors that
        died during one: such a container keeps its volume in use."""
        removed = abandoned(self._client, older_than_s)
        for container_id in removed:
            self.remove_container(container_id)
        return removed

    def reap_warm(self, worker_id: str, keep: set[str], stale_after_s: float,
                  ended: Callable[[list[str]], set[str]]) -> list[str]:
        """Remove warm containers nobody will use or wait for: this worker's
        that are not in ``keep`` (held, or running a command); any in this
        scope whose command has ended (``ended`` asks the database: its
        executor may be gone while the command still runs); and any that
        stopped more than ``stale_after_s`` after creation (a warm container
        stops when the executor attached to it goes away)."""
        stale_before = time.time() - stale_after_s
        listed = self.containers.listed(LABEL_WARM)
        done = ended([str(c["Id"]) for c in listed]) if listed else set()
        removed = []
        for c in listed:
            container_id = str(c["Id"])
            mine = (c.get("Labels") or {}).get(LABEL_WORKER) == worker_id
            stale = c.get("State") != "running" and int(c.get("Created") or 0) < stale_before
            if (mine and container_id not in keep) or stale or container_id in done:
                self.remove_container(container_id)
                removed.append(container_id)
        return removed


def _interaction_fields(interaction: Interaction | None) -> dict[str, Any]:
    """What the supervisor's c frame says of the command's input."""
    if interaction is None:
        return {}
    if interaction.tty:
        return {"tty": {"cols": interaction.cols, "rows": interaction.rows}}
    return {"stdin": True}
