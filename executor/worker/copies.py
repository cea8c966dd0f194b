"""Copies of sessions' files this host no longer needs: an archived session
runs nothing more, and its files are in the database, so its copy (and any
warm container waiting for it) is removed.

The executor learns of an archive in two ways: the shell_archived notice,
acted on at once, and a sweep of every copy it holds at start-up and every
PG_SHELL_REAP_INTERVAL_S. The notice is only a hint (any client may send
one, and none arrives while the executor is down), so a copy goes only
when the database says the session is archived and its files are stored;
the sweep (and the cleanup agent's round) catches what no notice reached.
A copy in use is left for the next sweep."""

from __future__ import annotations

import logging
import uuid

from executor.db.queue import ExecutorDatabase
from executor.sandbox import Sandbox, SandboxError

from .warm import WarmPool

log = logging.getLogger(__name__)
PAGE = 1000  # sessions asked about per call


class ArchivedCopies:
    def __init__(self, sandbox: Sandbox, warm: WarmPool) -> None:
        self._sandbox = sandbox
        self._warm = warm

    def sweep(self, db: ExecutorDatabase) -> int:
        """Removes the copies here of every archived session; returns how many."""
        return self.drop(db, self._sandbox.volumes.sessions())

    def drop(self, db: ExecutorDatabase, session_ids: list[str]) -> int:
        """Removes the copies of those of ``session_ids`` that are archived."""
        ids = [s for s in session_ids if _is_uuid(s)]
        removed = 0
        for start in range(0, len(ids), PAGE):
            for session in db.host_sessions(ids[start:start + PAGE]):
                if session.archived and session.stored and self._remove(session.session_id):
                    removed += 1
        return removed

    def _remove(self, session_id: str) -> bool:
        self._warm.drop_session(session_id)
        try:
            self._sandbox.volumes.remove(session_id)
        except SandboxError as exc:  # in use (a start under way): the next sweep
            log.info("session_id=%s is archived; its copy stays for now: %s", session_id, exc)
            return False
        log.info("session_id=%s is archived: its copy on this host is removed", session_id)
        return True


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False
