"""The cleanup agent (`pg-shell cleanup`): housekeeping that runs forever.

Each round it removes ended commands older than the retention period (in
batches; each session's chain resumes from a signed checkpoint), deletes the
volumes of sessions idle past PG_SHELL_VOLUME_IDLE_DAYS or archived (their
files are in the database; the executors remove those too, this catches
what they missed while down) and detaches the
loop devices of sessions idle past PG_SHELL_LOOP_IDLE_MINUTES. It runs where
the Docker engine (and the volume directory) is. A PostgreSQL or engine
outage is waited out with backoff; the daemon keeps going.
"""

from __future__ import annotations

import datetime
import logging
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import tenacity

from executor.audit.records import checkpoint_record
from executor.audit.signing import Signer
from executor.config import Settings
from executor.db import audit as db_audit
from executor.db import retention
from executor.db.database import Database, as_admin
from executor.errors import DatabaseUnavailable, PgShellError
from executor.sandbox import EngineUnavailable, Sandbox, SandboxError

log = logging.getLogger(__name__)
SESSIONS_PER_PAGE = 100
# Trees and blobs stored for a command that has not completed yet are not
# reached by anything: they are kept this long before retention may take them.
FILES_GRACE = datetime.timedelta(hours=1)


@dataclass
class RoundResult:
    commands_removed: int = 0
    sessions_trimmed: int = 0
    volumes_removed: int = 0
    loops_released: int = 0
    trees_removed: int = 0
    blobs_removed: int = 0
    upload_parts_removed: int = 0


class Cleanup:
    def __init__(self, settings: Settings, sandbox: Sandbox | None) -> None:
        """``sandbox`` None: retention only (no engine on this host)."""
        self.settings = settings
        self._sandbox = sandbox
        self._dsn = settings.require_database_url()
        self._signer = Signer.from_file(settings.signing_key_file)
        self._owner = f"cleanup@{socket.gethostname()}"

    # -- one round -------------------------------------------------------------------

    def run_round(self) -> RoundResult:
        result = RoundResult()
        with as_admin(self._dsn, "cleanup") as db:
            self._remove_old_history(db, result)
            result.trees_removed, result.blobs_removed = retention.collect_files(db, FILES_GRACE)
            result.upload_parts_removed = retention.collect_upload_parts(db)
            if self._sandbox is not None:
                self._tidy_volumes(db, result)
        log.info("cleanup round: removed %d commands from %d sessions, %d trees and %d blobs no "
                 "one reaches, %d parts of abandoned uploads, %d volumes; released %d loop "
                 "devices", result.commands_removed, result.sessions_trimmed,
                 result.trees_removed, result.blobs_removed, result.upload_parts_removed,
                 result.volumes_removed, result.loops_released)
        return result

    def _sign_checkpoint(self, session_id: str, chain_seq: int, chain_hash: str,
                         removed: int) -> tuple[str, str, str]:
        record = checkpoint_record(signer=self._signer.key_id, session_id=session_id,
                                   chain_seq=chain_seq, chain_hash=chain_hash, removed=removed)
        return record, self._signer.sign(record), self._signer.key_id

    def _remove_old_history(self, db: Database, result: RoundResult) -> None:
        db_audit.register_key(db, self._signer.public_key_hex, self._owner)
        before = _now() - datetime.timedelta(days=self.settings.retention_days)
        batch = self.settings.retention_batch
        after: str | None = None
        while page := retention.sessions_with_old_history(db, before, after, SESSIONS_PER_PAGE):
            for session_id in page:
                removed_here = 0
                while True:
                    gone = retention.remove_batch(db, session_id, before, batch,
                                                  self._sign_checkpoint)
                    removed_here += gone
                    if gone < batch:
                        break
                if removed_here:
                    result.commands_removed += removed_here
                    result.sessions_trimmed += 1
                    log.info("session_id=%s: removed %d commands older than %s",
                             session_id, removed_here, before.isoformat())
            after = page[-1]

    def _tidy_volumes(self, db: Database, result: RoundResult) -> None:
        assert self._sandbox is not None
        volumes = self._sandbox.volumes
        now = _now()
        known = [sid for sid in volumes.sessions() if _is_uuid(sid)]
        volume_cutoff = now - datetime.timedelta(days=self.settings.volume_idle_days)
        stale = retention.idle_sessions(db, known, volume_cutoff) if known else set()
        stale |= retention.archived_sessions(db, known) if known else set()
        for session_id in sorted(stale):
            if self._try(volumes.remove, session_id, "remove volume"):
                result.volumes_removed += 1
        attached = [sid for sid in volumes.attached() if _is_uuid(sid) and sid not in stale]
        loop_cutoff = now - datetime.timedelta(minutes=self.settings.loop_idle_minutes)
        idle = retention.idle_sessions(db, attached, loop_cutoff) if attached else set()
        for session_id in sorted(idle):
            if self._try(volumes.release, session_id, "release loop device"):
                result.loops_released += 1

    @staticmethod
    def _try(action: Callable[[str], None], session_id: str, what: str) -> bool:
        try:
            action(session_id)
        except EngineUnavailable:
            raise
        except SandboxError as exc:  # e.g. a command started meanwhile: next round
            log.warning("session_id=%s: cannot %s: %s", session_id, what, exc)
            return False
        log.info("session_id=%s: %s done", session_id, what)
        return True

    # -- rounds with backoff -------------------------------------------------------------

    def run_once(self, attempts: int = 3) -> RoundResult:
        """One round, retried a few times over an outage; raises if it cannot finish."""
        retrying = self._retrying(tenacity.stop_after_attempt(attempts), threading.Event())
        return retrying(self.run_round)

    def run_forever(self, stop: threading.Event) -> None:
        """Rounds every PG_SHELL_CLEANUP_INTERVAL_S until ``stop``; outages are
        waited out, a failed round is logged and the next one comes."""
        while not stop.is_set():
            try:
                self._retrying(tenacity.stop_when_event_set(stop), stop)(self.run_round)
            except (PgShellError, SandboxError) as exc:
                if stop.is_set():
                    break
                log.warning("cleanup round failed, next round in %.0fs: %s",
                            self.settings.cleanup_interval_s, exc)
            stop.wait(self.settings.cleanup_interval_s)

    @staticmethod
    def _retrying(stop_condition: tenacity.stop.stop_base,
                  stop: threading.Event) -> tenacity.Retrying:
        def sleep(seconds: float) -> None:
            stop.wait(seconds)  # a stop request ends the wait early

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception_type((DatabaseUnavailable, EngineUnavailable)),
            wait=tenacity.wait_exponential(multiplier=0.5, max=30),
            stop=stop_condition,
            sleep=sleep,
            before_sleep=lambda s: log.warning(
                "cleanup waits for PostgreSQL / the engine (attempt %d): %s", s.attempt_number,
                s.outcome.exception() if s.outcome else ""),
            reraise=True,
        )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False
