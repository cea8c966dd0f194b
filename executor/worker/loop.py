"""The claim loop: wake on NOTIFY (or poll), claim the head command of free
sessions, run each on a thread of its own (command.py), keep leases alive,
and drain on shutdown. It speaks to PostgreSQL through executor.db and to
Docker through executor.sandbox, never to either library directly."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from executor.audit.signing import Signer
from executor.config import Settings
from executor.db import audit as db_audit
from executor.db.listener import Listener
from executor.db.queue import ExecutorDatabase
from executor.db.terminal import TerminalDatabase
from executor.db.workspace import WorkspaceStore
from executor.errors import ConfigError, DatabaseUnavailable, LeaseLost, PgShellError
from executor.sandbox import Sandbox, SandboxError
from executor.secrets.key import SecretsKey
from executor.workspace.capture import CaptureLimits
from executor.workspace.host import HostFiles

from .blank_start import BlankStart
from .command import CommandLife
from .copies import ArchivedCopies
from .outcome import LEASE_LOST, SHUTDOWN, Run
from .promotion import ImagePromotion
from .warm import Adoption, WarmPool

log = logging.getLogger(__name__)
# What the database announces to executors: work, cancels, sessions to warm
# or archived, input for a command held here.
CHANNELS = ("shell_commands", "shell_cancel", "shell_sessions", "shell_archived", "shell_input")
MiB = 1024 * 1024


class Worker:
    def __init__(self, settings: Settings, sandbox: Sandbox, stop: threading.Event,
                 notify: Callable[[str], None] = lambda _: None) -> None:
        self.settings = settings
        self.worker_id = settings.effective_worker_id()
        self._sandbox = sandbox
        self._stop = stop
        self._notify = notify
        self._dsn = settings.require_database_url()
        self._signer = Signer.from_file(settings.signing_key_file)
        self._secrets_key: SecretsKey | None = None  # loaded (or made) at start-up
        self._files = HostFiles(sandbox, settings.volumes_dir, CaptureLimits(
            max_entries=settings.capture_max_entries, max_bytes=settings.capture_max_mb * MiB,
            quota_bytes=settings.disk_quota_mb * MiB), settings.capture_change_records)
        # The main loop must stay responsive (signals, watchdog) during an
        # outage, so its connections try once per round; command threads
        # retry until the database is back.
        self._control = self._database("claim", persistent=False)
        self._listener = Listener(self._database("listen", persistent=False), CHANNELS)
        self._runs: dict[int, Run] = {}
        self._runs_lock = threading.Lock()
        self._idle_dbs: queue.SimpleQueue[ExecutorDatabase] = queue.SimpleQueue()
        self._threads = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="command")
        self._remover = ThreadPoolExecutor(1, thread_name_prefix="remove")
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._maintenance_done = threading.Event()
        self._recheck_at: float | None = None  # claim again then (claim affinity's grace)
        # Set at start-up, when the engine is asked for the image.
        self._images: ImagePromotion | None = None
        self._warm: WarmPool
        self._adopting: ExecutorDatabase | None = None
        self._archiving: ExecutorDatabase | None = None
        self._copies: ArchivedCopies
        self._life: CommandLife

    def running(self) -> int:
        """Commands whose container is running now (a metric)."""
        with self._runs_lock:
            return sum(1 for run in self._runs.values() if run.started_at)

    def _database(self, purpose: str, persistent: bool = True) -> ExecutorDatabase:
        return ExecutorDatabase(self._dsn, self.settings.executor_role,
                                name=f"pg-shell-executor {purpose}", persistent=persistent)

    def wake(self) -> None:
        """Interrupts the main loop's wait (a slot freed, a session adopted,
        or stop was asked)."""
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # already awake

    # -- start-up ----------------------------------------------------------------

    def _open_secrets_key(self, db: ExecutorDatabase) -> SecretsKey | None:
        """The key that opens users' secrets: the file's, or a new one in it
        while the database holds no secret encrypted to another. Every
        executor must hold the same: a second key made on another host would
        leave each host unable to open what was set while the other's was
        the newest."""
        path = self.settings.secrets_key_file
        if not path:
            log.warning("worker %s holds no secrets key (PG_SHELL_SECRETS_KEY_FILE is empty): "
                        "commands of sessions that use secrets fail here", self.worker_id)
            return None
        if not Path(path).exists():
            in_use = db.secrets_key_in_use()
            if in_use is not None:
                raise ConfigError(
                    f"secrets key {path} does not exist, and the database holds secrets "
                    f"encrypted to key {in_use}: copy that key's file here from a host that has "
                    "it (every executor needs the same one), or set PG_SHELL_SECRETS_KEY_FILE= "
                    "to run without secrets")
        return SecretsKey.from_file(path)

    def start_up(self) -> None:
        isolation = self._sandbox.isolation()
        log.info("worker %s: engine isolation is %s", self.worker_id, isolation)
        if isolation == "rootful" and not self.settings.allow_rootful:
            raise PgShellError(
                "the Docker engine is rootful: a container escape would be root on the host. "
                "Use a rootless engine (ops/rootless-docker), "
                "or set PG_SHELL_ALLOW_ROOTFUL=1 to accept it.")
        runtimes = self._sandbox.runtimes()
        if self.settings.runtime not in runtimes:
            raise PgShellError(
                f"PG_SHELL_RUNTIME={self.settings.runtime}: the Docker engine has no runtime "
                f"{self.settings.runtime} (it has {', '.join(sorted(runtimes))}). "
                "ops/docker-engine registers runsc (gVisor) with an engine it runs.")
        log.info("worker %s: commands run under %s unless their user's runtime is another "
                 "(the engine has %s)", self.worker_id, self.settings.runtime,
                 ", ".join(sorted(runtimes)))
        self._images = images = ImagePromotion(self._sandbox, self.settings.image)
        blanks = BlankStart(self._sandbox, self.worker_id, lambda: images.current,
                            self.settings.warm_blank and self.settings.effective_warm_max() > 0
                            and self._sandbox.has_blank_copies)
        self._warm = WarmPool(self._sandbox, self.worker_id, self.settings.effective_warm_max(),
                              self.settings.warm_idle_s, self.settings.warm_per_user,
                              self.settings.warm_per_session, blanks)
        self._copies = ArchivedCopies(self._sandbox, self._warm)
        db = self._database("start-up")
        self._secrets_key = self._open_secrets_key(db)
        self._life = CommandLife(self.settings, self.worker_id, self._sandbox, self._signer,
                                 self._files, images, self._warm, self._stop, self._remove_later,
                                 runtimes, self._secrets_key,
                                 lambda: TerminalDatabase(self._dsn, self.settings.executor_role,
                                                          name="pg-shell-executor input"))
        images.follow(db)
        db_audit.register_key(db, self._signer.public_key_hex, self.worker_id)
        db.publish_time_limit(self.settings.timeout_s)
        log.info("worker %s signs results with key %s", self.worker_id, self._signer.key_id)
        if self._secrets_key is not None:
            db.register_secrets_key(self._secrets_key.fingerprint, self._secrets_key.public_key)
            log.info("worker %s opens secrets with key %s", self.worker_id,
                     self._secrets_key.fingerprint)
        # Containers this worker id left behind may have run even if they
        # were never marked running: those commands must not run again.
        leftovers = self._sandbox.command_ids(self.worker_id)
        for row in db.settle_worker(self.worker_id, leftovers):
            log.warning("settled command_id=%s of a previous run of this worker: %s",
                        row["command_id"], row["status"])
        self._reap(db)
        for container_id in self._warm.reap(db.ended_containers):
            log.info("removed leftover warm container_id=%s", container_id[:12])
        blanks.refill()  # after the reap, which would take it for a leftover
        self._copies.sweep(db)  # sessions archived while this host's executors were down
        self._idle_dbs.put(db)
        self._listener.start()

    # -- the main loop -------------------------------------------------------------

    def run(self) -> None:
        self.start_up()
        maintenance = threading.Thread(target=self._maintain, name="maintenance", daemon=True)
        maintenance.start()
        self._notify("READY=1")
        log.info("worker %s ready: concurrency %d", self.worker_id, self.settings.concurrency)
        while not self._stop.is_set():
            self._notify("WATCHDOG=1")
            self._claim()
            self._wait_for_work()
        self._notify("STOPPING=1")
        self._warm.close()
        self._drain()
        self._files.close()
        self._maintenance_done.set()
        maintenance.join()
        self._remover.shutdown(wait=True)
        try:
            self._sandbox.sweep_blank_copies()
        except SandboxError as exc:  # the next executor's first blank sweeps them
            log.warning("blank copies not swept: %s", exc)
        log.info("worker %s stopped", self.worker_id)

    def _free_slots(self) -> int:
        with self._runs_lock:
            return self.settings.concurrency - len(self._runs)

    def _claim(self) -> None:
        while (free := self._free_slots()) > 0 and not self._stop.is_set():
            try:
                claimed = self._control.claim(
                    self.worker_id, free, self.settings.lease_s, self.settings.host_id,
                    self.settings.affinity_grace_ms,
                    self._images.templates() if self._images else None,
                    round(self.settings.template_wait_s * 1000))
            except DatabaseUnavailable as exc:
                log.warning("cannot claim, database unavailable: %s", exc)
                return
            except Exception:
                log.exception("claim failed; trying again next round")
                return
            for command in claimed:
                run = Run(command)
                with self._runs_lock:
                    self._runs[command.command_id] = run
                log.info("claimed command_id=%s session_id=%s attempt=%s",
                         command.command_id, command.session_id, command.attempt)
                self._threads.submit(self._execute, run)
            if len(claimed) < free:
                return

    def _wait_for_work(self) -> None:
        timeout = self.settings.poll_interval_s
        if self._recheck_at is not None:
            timeout = min(timeout, max(0.0, self._recheck_at - time.monotonic()))
            self._recheck_at = None
        for channel, payload in self._listener.wait(timeout, self._wake_r):
            if channel == "shell_input" and payload.isdigit():
                self._input(int(payload))
            elif channel == "shell_cancel" and payload.isdigit():
                self._cancel(int(payload), "cancelled")
            elif channel == "shell_sessions" and self._images is not None:
                self._warm.adopt(payload, self._adopt)
            elif channel == "shell_archived":
                self._remover.submit(self._drop_archived, payload)
            elif channel == "shell_commands" and self.settings.affinity_grace_ms:
                # A command another host may be preferred for: if that host
                # does not take it, take it once its grace has passed.
                self._recheck_at = time.monotonic() + self.settings.affinity_grace_ms / 1000 + 0.005
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass

    def _adopt(self, session_id: str) -> Adoption | None:
        """Called from the warm pool's one thread only, on its own connection:
        the session's user and image if this host adopted it. A session whose
        template has no image here is left to a host that has one."""
        if self._adopting is None:
            self._adopting = self._database("warm", persistent=False)
        found = self._adopting.host_sessions([session_id])
        image = self._images.of_template(found[0].template) if found and self._images else None
        if image is None or not self._adopting.adopt_session(session_id, self.settings.host_id):
            return None
        # The adoption held the session's lane while a claim may have passed
        # it over (SKIP LOCKED): its first command, submitted right after
        # the session, is claimed now rather than at the next recheck.
        self.wake()
        return Adoption(found[0].user_id, image, found[0].runtime)

    def _drop_archived(self, session_id: str) -> None:
        """On the remover's one thread, on its own connection."""
        try:
            if self._archiving is None:
                self._archiving = self._database("copies", persistent=False)
            self._copies.drop(self._archiving, [session_id])
        except (PgShellError, SandboxError) as exc:
            log.warning("session_id=%s archived, copy not removed yet: %s", session_id[:64], exc)

    def _input(self, command_id: int) -> None:
        with self._runs_lock:
            run = self._runs.get(command_id)
        if run is not None and run.feed is not None:
            run.feed.announce()

    def _cancel(self, command_id: int, reason: str) -> None:
        with self._runs_lock:
            run = self._runs.get(command_id)
        if run:
            log.info("stopping command_id=%s: %s", command_id, reason)
            run.stop(reason)

    # -- one command -----------------------------------------------------------------

    def _borrow_db(self) -> ExecutorDatabase:
        try:
            return self._idle_dbs.get_nowait()
        except queue.Empty:
            return self._database("command")

    def _execute(self, run: Run) -> None:
        # Two connections: output is flushed from the writer's thread while
        # the command's files are stored from this one.
        db, files_db = self._borrow_db(), self._borrow_db()
        try:
            self._life.execute(db, WorkspaceStore(files_db), run)
        except LeaseLost as exc:
            log.warning("command_id=%s: %s", run.claimed.command_id, exc)
        except Exception:
            log.exception("command_id=%s failed in the executor", run.claimed.command_id)
        finally:
            self._idle_dbs.put(db)
            self._idle_dbs.put(files_db)
            with self._runs_lock:
                self._runs.pop(run.claimed.command_id, None)
            self.wake()

    def _remove_later(self, container_id: str) -> None:
        # Its exit starts now, beside the removals queued before it.
        self._sandbox.let_exit(container_id)
        self._remover.submit(self._remove, container_id)

    def _remove(self, container_id: str) -> None:
        try:
            self._sandbox.remove_container(container_id)
        except SandboxError as exc:
            log.warning("container_id=%s not removed (the reaper will): %s", container_id[:12], exc)

    # -- leases, cancellation, clean-up -------------------------------------------------

    def _maintain(self) -> None:
        db = self._database("maintenance", persistent=False)
        last_expiry = last_reap = time.monotonic()
        while not self._maintenance_done.wait(self.settings.heartbeat_interval_s):
            try:
                self._heartbeat(db)
                if self._images is not None:
                    self._images.follow(db)
                    self._warm.keep_only(self._images.images())
                    self._warm.expire()
                now = time.monotonic()
                if now - last_expiry >= self.settings.lease_s / 2:
                    for row in db.expire_leases():
                        log.warning("lease expired: command_id=%s is now %s",
                                    row["command_id"], row["status"])
                    last_expiry = now
                if now - last_reap >= self.settings.reap_interval_s:
                    self._reap(db)
                    for container_id in self._warm.reap(db.ended_containers):
                        log.info("removed leftover warm container_id=%s", container_id[:12])
                    self._copies.sweep(db)
                    last_reap = now
            except PgShellError as exc:
                # An outage (database or engine) must not end this thread:
                # without it no lease is renewed and every command is lost.
                log.warning("maintenance round failed, will retry: %s", exc)
            except Exception:
                log.exception("maintenance round failed, will retry")

    def _heartbeat(self, db: ExecutorDatabase) -> None:
        with self._runs_lock:
            held = {cid: run.claimed.attempt for cid, run in self._runs.items()}
        if not held:
            return
        alive = db.heartbeat(self.worker_id, held, self.settings.lease_s)
        for command_id in held:
            if command_id not in alive:
                self._cancel(command_id, LEASE_LOST)
            elif alive[command_id]:
                self._cancel(command_id, "cancelled")

    def _reap(self, db: ExecutorDatabase) -> None:
        def keep(command_id: int) -> bool:
            with self._runs_lock:
                if command_id in self._runs:
                    return True
            return bool(db.live_commands([command_id]))

        for container_id in self._sandbox.reap(keep):
            log.info("removed leftover container_id=%s", container_id[:12])
        for container_id in self._sandbox.reap_hand_overs():
            log.info("removed abandoned hand-over container_id=%s", container_id[:12])

    # -- shutdown --------------------------------------------------------------------------

    def _drain(self) -> None:
        """Lets running commands finish within the grace period, then kills
        them (recorded as "executor shutdown")."""
        deadline = time.monotonic() + self.settings.shutdown_grace_s
        log.info("draining: %d commands running, grace %.0fs", len(self._runs),
                 self.settings.shutdown_grace_s)
        while self._runs and time.monotonic() < deadline:
            time.sleep(0.05)
        with self._runs_lock:
            for run in self._runs.values():
                run.stop(SHUTDOWN)
        self._threads.shutdown(wait=True)
        self._release_unstarted()

    def _release_unstarted(self) -> None:
        """Hands commands claimed but never started back to their queues at
        once, instead of letting their leases run out."""
        try:
            for row in self._database("shutdown", persistent=False).settle_worker(
                    self.worker_id, []):
                log.info("released command_id=%s: %s", row["command_id"], row["status"])
        except PgShellError as exc:
            log.warning("could not release unstarted commands (their leases will expire): %s", exc)
