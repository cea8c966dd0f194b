"""One held command's life: its files brought here, its container created
and started (each recorded before the next step), its output streamed, its
files stored, and its outcome signed and completed in the database."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import tenacity

from executor import metrics
from executor.audit.records import (
    ChainPosition,
    Completion,
    SignedRecord,
    result_record,
    sha256_hex,
    utc_now,
)
from executor.audit.signing import Signer
from executor.config import Settings
from executor.db.queue import ExecutorDatabase
from executor.db.terminal import TerminalDatabase, command_terminal
from executor.db.workspace import WorkspaceStore
from executor.sandbox import (
    EngineUnavailable,
    Interaction,
    RunRequest,
    RunResult,
    Sandbox,
    SandboxError,
    Started,
)
from executor.secrets.handed import SecretsUnavailable, open_secrets
from executor.secrets.key import SecretsKey
from executor.secrets.mask import SecretMask
from executor.workspace.capture import Capture
from executor.workspace.host import HostFiles
from executor.workspace.restore import RestoreFailed

from .input_feed import InputFeed
from .outcome import SHUTDOWN, Outcome, Run, outcome_of
from .output_writer import OutputWriter
from .promotion import ImagePromotion
from .turns import SessionTurns
from .warm import WarmPool

log = logging.getLogger(__name__)


@dataclass
class _Progress:
    """Records the container as created, then as started, as the sandbox
    reaches each step."""

    db: ExecutorDatabase
    worker_id: str
    run: Run
    image: str
    default_image: str
    runtime: str
    writer: OutputWriter
    mask: SecretMask | None  # the command's secret values, kept out of its stored state
    created: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)

    def on_created(self, container_id: str) -> None:
        # Recorded before the start: if this executor vanishes now, the
        # command may have run and must not be claimed again.
        self.db.mark_created(self.run.claimed, self.worker_id, container_id)
        self.created.set()

    def on_started(self, container_id: str) -> None:
        # For a container started ahead (warm), the only record before its
        # command is sent: running, with its id.
        cmd = self.run.claimed
        self.db.mark_started(cmd, self.worker_id, container_id, self.image, self.runtime)
        self.created.set()
        self.run.started_at = utc_now()
        metrics.command_started(time.monotonic() - self.run.claimed_monotonic)
        if cmd.image_digest and cmd.image_digest != self.default_image == self.image:
            # A replay whose original's image is gone says so in its output.
            self.writer.write(f"[pg-shell: image {cmd.image_digest} no longer exists; "
                              f"ran on {self.image}]\n")
        self.started.set()
        log.info("started command_id=%s container_id=%s", cmd.command_id, container_id[:12])


class CommandLife:
    """Runs the commands a worker holds, one call of :meth:`execute` each."""

    def __init__(self, settings: Settings, worker_id: str, sandbox: Sandbox, signer: Signer,
                 files: HostFiles, images: ImagePromotion, warm: WarmPool,
                 stop: threading.Event, remove: Callable[[str], None], runtimes: set[str],
                 secrets_key: SecretsKey | None,
                 terminal_db: Callable[[], TerminalDatabase]) -> None:
        self._flush_s = settings.output_flush_interval_s
        self._notify_s = settings.output_notify_interval_s
        self._worker_id = worker_id  # the loop's: one id per process, whichever claims
        self._host_id = settings.host_id
        self._sandbox = sandbox
        self._signer = signer
        self._files = files
        self._images = images
        self._warm = warm
        self._stop = stop
        self._remove = remove  # a finished command's container, off the critical path
        self._runtimes = runtimes  # those the engine had at start-up
        self._secrets_key = secrets_key  # None: commands that need secrets fail here
        self._terminal_db = terminal_db  # a connection for a command's input
        self._turns = SessionTurns()  # the copy's index is committed after completing
        # Starts a command's own container while its files are restored.
        self._starts = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="start")

    def execute(self, db: ExecutorDatabase, store: WorkspaceStore, run: Run) -> None:
        cmd = run.claimed
        # The session's copy here is in use from before its files are
        # brought here until the command completed: never evicted in between
        # (sandbox/host_copies.py). Its owner is named when its files are in
        # the database, which is what makes evicting it safe.
        with self._turns.turn(cmd.session_id), \
                self._sandbox.volumes.hold(cmd.session_id,
                                           cmd.user_id if cmd.root is not None else None):
            try:
                self._execute(db, store, run)
            finally:
                self._warm.ended(cmd.session_id)

    def _execute(self, db: ExecutorDatabase, store: WorkspaceStore, run: Run) -> None:
        cmd = run.claimed
        if run.cancel.is_set():
            if run.kill_reason != SHUTDOWN:  # on shutdown it goes back to its queue
                self._complete_unstarted(db, run, run.kill_reason or "cancelled")
            return
        if cmd.upload is not None:  # a replayed upload: the database applies it
            store.complete_upload(cmd.command_id, self._worker_id, cmd.attempt)
            log.info("applied upload command_id=%s", cmd.command_id)
            return
        # A promotion meanwhile applies to the next command.
        default_image = self._images.of_template(cmd.template)
        if default_image is None:
            # Claimed only once hosts that have it were given their time
            # (PG_SHELL_TEMPLATE_WAIT_S): none took it.
            self._complete_unstarted(db, run, f"template {cmd.template} has no image on this "
                                              "host, and no host with its image took the command")
            return
        runtime = cmd.runtime or self._sandbox.runtime
        if runtime not in self._runtimes:
            self._complete_unstarted(db, run, f"runtime {runtime} is not available on this host "
                                              f"(it has {', '.join(sorted(self._runtimes))})")
            return
        try:
            secrets = open_secrets(self._secrets_key, cmd.secrets)
        except SecretsUnavailable as exc:
            self._complete_unstarted(db, run, str(exc))
            return
        image = self._images.for_command(cmd, default_image)
        interaction = self._interaction(db, run)
        tty = interaction is not None and interaction.tty
        mask = SecretMask(secrets.values(), terminal=tty) if secrets else None
        save_output = metrics.counting_output(
            lambda seq, data, notify: db.append_output(cmd, self._worker_id, seq, data, notify))
        writer = OutputWriter(save_output, self._flush_s,
                              lambda: db.announce_output(cmd, self._worker_id), self._notify_s,
                              eager=tty, mask=mask)
        progress = _Progress(db, self._worker_id, run, image, default_image, runtime, writer, mask)
        request = RunRequest(command_id=cmd.command_id, session_id=cmd.session_id,
                             worker_id=self._worker_id, command=cmd.command, cwd=cmd.cwd,
                             env=dict(cmd.env), image=image, interaction=interaction,
                             runtime=runtime, secrets=secrets)
        try:
            capture, result = self._run_until_engine_answers(request, store, progress)
        except RestoreFailed as exc:
            writer.close()
            self._complete_unstarted(db, run, f"the session's files could not be restored: {exc}")
            return
        except SandboxError as exc:
            writer.close()
            self._engine_failed(db, progress, exc)
            return
        finally:
            if run.feed is not None:
                run.input_sha256 = run.feed.seal()
        self._finish(db, progress, capture, result)

    def _interaction(self, db: ExecutorDatabase, run: Run) -> Interaction | None:
        """How the command takes input, with the feed that delivers it; None
        for a command without input."""
        found = command_terminal(db, run.claimed, self._worker_id)
        if found is None:
            return None
        run.feed = InputFeed(self._terminal_db(), run.claimed, self._worker_id)
        return Interaction(tty=bool(found["tty"]), cols=int(found["cols"] or 80),
                           rows=int(found["rows"] or 24), idle_s=float(found["idle_s"]),
                           max_s=float(found["max_s"]))

    def _run_until_engine_answers(self, request: RunRequest, store: WorkspaceStore,
                                  progress: _Progress) -> tuple[Capture, RunResult]:
        """Brings the session's files here and runs the command; while the
        engine is unreachable and no container was created, waits and tries
        again (the lease is kept alive meanwhile)."""
        run = progress.run
        # The session's warm container, if this executor holds one: only the
        # first attempt may use it (a retry means the engine went away).
        taken = self._warm.take(request.session_id, request.image, progress.runtime)
        warm = [taken] if taken is not None else []

        def attempt() -> tuple[Capture, RunResult]:
            started = warm.pop() if warm else None
            # Without a warm container, the command's own starts now and
            # waits for its command while the files are brought here (the
            # copy made, checked or restored): the start costs most, and
            # overlaps the rest. A restore's container then exits without
            # unmounting the copy (which would write it out first).
            beside = None if started else self._starts.submit(self._sandbox.start, request)
            try:
                capture = self._files.prepare(store, request, run.claimed.root)
                if beside is not None:
                    started = beside.result()
            except BaseException:
                if started is None and beside is not None:
                    started = _result_or_none(beside)
                if started is not None:
                    self._sandbox.discard(started)
                raise
            return capture, self._sandbox.run(request, progress.on_started, progress.writer.write,
                                              run.cancel, on_created=progress.on_created,
                                              files=capture, warm=started, feed=run.feed)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(
                lambda e: (isinstance(e, EngineUnavailable) and not progress.created.is_set()
                           and not run.cancel.is_set())),
            wait=tenacity.wait_exponential(multiplier=0.2, max=5),
            stop=tenacity.stop_when_event_set(self._stop),
            before_sleep=lambda s: log.warning("engine unavailable, command_id=%s waits: %s",
                                               request.command_id,
                                               s.outcome.exception() if s.outcome else ""),
            reraise=True,
        )
        try:
            return retrying(attempt)
        finally:
            if taken is not None:
                self._warm.finished(taken)

    def _engine_failed(self, db: ExecutorDatabase, progress: _Progress,
                       exc: SandboxError) -> None:
        run = progress.run
        if progress.started.is_set():
            reason = f"engine error: {exc}"
            log.warning("command_id=%s failed: %s", run.claimed.command_id, reason)
            self._complete(db, run, Completion(
                status="failed", exit_code=None, reason=reason,
                output_sha256=progress.writer.output_sha256, image_digest=progress.image,
                started_at=run.started_at, input_sha256=run.input_sha256,
                runtime=progress.runtime))
        elif progress.created.is_set() or not self._stop.is_set():
            metrics.CONTAINER_START_FAILURES.inc()
            self._complete_unstarted(db, run, f"container failed to start: {exc}")
        # else: the engine was away until shutdown; the drain releases it.

    def _finish(self, db: ExecutorDatabase, progress: _Progress, capture: Capture,
                result: RunResult) -> None:
        run, writer = progress.run, progress.writer
        cmd = run.claimed
        files = self._files.finish(capture, result, cmd.root)
        notes = "; ".join(n for n in (result.state_note, files.note) if n)
        if notes:
            writer.write(f"\n[pg-shell: {notes}]\n")
        writer.close()
        cwd_after, env_after = result.cwd, result.env
        if progress.mask is not None:  # e.g. `export COPY=$TOKEN`, `cd "$TOKEN"`
            mask = progress.mask
            cwd_after = mask.text(cwd_after)
            # A variable named after a value (`export "$TOKEN"=1`) is dropped.
            env_after = {name: mask.text(value) for name, value in env_after.items()
                         if mask.text(name) == name}
        end = outcome_of(result.exit_code, result.reason, run.kill_reason)
        if files.failure and end.status == "done":
            # Ran to its end, but what it did to the files could not be kept.
            end = Outcome("failed", end.exit_code, files.failure)
        self._complete(db, run, Completion(
            status=end.status, exit_code=end.exit_code, reason=end.reason,
            output_sha256=writer.output_sha256, image_digest=progress.image,
            started_at=run.started_at, truncated=result.truncated,
            duration_ms=int(result.duration_s * 1000), cwd_after=cwd_after,
            env_after=env_after, root_after=files.root_after,
            host=self._host_id if files.captured is not None else None,
            input_sha256=run.input_sha256, runtime=progress.runtime))
        self._files.committed(cmd.session_id, files)
        if result.reason is None:  # the session is in use: its next command starts warm
            image = self._images.of_template(cmd.template) or progress.default_image
            self._warm.prepare(cmd.session_id, image, cmd.user_id,
                               files.root_after is not None, progress.runtime)
        log.info("completed command_id=%s status=%s exit_code=%s reason=%s",
                 cmd.command_id, end.status, end.exit_code, end.reason)
        self._remove(result.container_id)

    def _complete_unstarted(self, db: ExecutorDatabase, run: Run, reason: str) -> None:
        status = "cancelled" if reason == "cancelled" else "failed"
        self._complete(db, run, Completion(status=status, exit_code=None, reason=reason,
                                           output_sha256=sha256_hex(""),
                                           image_digest=run.claimed.image_digest))
        log.info("completed command_id=%s without running it: %s", run.claimed.command_id, reason)

    def _complete(self, db: ExecutorDatabase, run: Run, outcome: Completion) -> None:
        """Completes the command with its result record, signed."""
        def sign(position: ChainPosition) -> SignedRecord:
            record = result_record(signer=self._signer.key_id, worker_id=self._worker_id,
                                   claimed=run.claimed, outcome=outcome, position=position)
            return SignedRecord(record, self._signer.sign(record), self._signer.key_id)

        db.complete(run.claimed, self._worker_id, sign)
        metrics.command_completed(run.claimed.user_id, outcome.status, outcome.reason,
                                  outcome.duration_ms)


def _result_or_none(future: Future[Started]) -> Started | None:
    """The container a start made, once it ended; None if it failed."""
    try:
        return future.result()
    except Exception:  # the error that ends the command is another
        return None
