"""Warm starts (DESIGN.md §10): after a session's command completes here,
its next container is created and started ahead of time, so the next
command is handed over stdin instead of waiting for a container start. A
warm container runs one command at most and is never reused; the pool is
bounded in number and idle time, and what it removes unused is counted as
wasted, by reason."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from executor import metrics
from executor.errors import PgShellError
from executor.sandbox import Sandbox, SandboxError, Started

log = logging.getLogger(__name__)


class WarmPool:
    def __init__(self, sandbox: Sandbox, worker_id: str, max_count: int, idle_s: float) -> None:
        self._sandbox = sandbox
        self._worker_id = worker_id
        self._max = max_count
        self._idle_s = idle_s
        self._held: dict[str, Started] = {}  # by session id
        self._starting: set[str] = set()
        self._in_use: set[str] = set()  # ids of taken containers whose command still runs
        self._lock = threading.Lock()
        self._closed = False
        # One starter: warm starts must not compete with claimed commands'
        # starts for the engine more than that.
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="warm")
        metrics.WARM_CONTAINERS.set_function(self.count)

    def count(self) -> int:
        with self._lock:
            return len(self._held)

    def prepare(self, session_id: str, image: str) -> None:
        """Starts the session's next container in the background, unless
        one is held or starting, or the pool is full."""
        if self._reserve(session_id):
            self._starter.submit(self._start, session_id, image)

    def adopt(self, session_id: str, image: str, claim: Callable[[str], bool]) -> None:
        """A new session, or one a client opened: if this executor is the
        host claiming prefers for it, or becomes it (``claim``), the
        session's next container starts now, before its command exists."""
        if self._reserve(session_id):
            self._starter.submit(self._adopt_and_start, session_id, image, claim)

    def _reserve(self, session_id: str) -> bool:
        with self._lock:
            if (self._closed or session_id in self._held or session_id in self._starting
                    or len(self._held) + len(self._starting) >= self._max):
                return False
            self._starting.add(session_id)
            return True

    def _adopt_and_start(self, session_id: str, image: str, claim: Callable[[str], bool]) -> None:
        try:
            adopted = claim(session_id)
        except PgShellError as exc:
            log.warning("could not adopt session_id=%s: %s", session_id, exc)
            adopted = False
        if adopted:
            self._start(session_id, image)
        else:
            with self._lock:
                self._starting.discard(session_id)

    def _start(self, session_id: str, image: str) -> None:
        try:
            started = self._sandbox.warm(session_id, self._worker_id, image)
        except SandboxError as exc:
            log.warning("no warm container for session_id=%s: %s", session_id, exc)
            with self._lock:
                self._starting.discard(session_id)
            return
        with self._lock:
            self._starting.discard(session_id)
            keep = not self._closed and session_id not in self._held
            if keep:
                self._held[session_id] = started
        if not keep:
            self._waste(started, "shutdown")

    def take(self, session_id: str, image: str) -> Started | None:
        """The session's warm container for a command on ``image``, if one
        is held and still waits; it leaves the pool (used once)."""
        with self._lock:
            started = self._held.pop(session_id, None)
        if started is None:
            metrics.WARM_MISSES.labels("none").inc()
            return None
        if started.image != image:
            self._waste(started, "image")
            metrics.WARM_MISSES.labels("image").inc()
            return None
        if not self._sandbox.usable(started):
            self._waste(started, "dead")
            metrics.WARM_MISSES.labels("dead").inc()
            return None
        metrics.WARM_HITS.inc()
        with self._lock:
            self._in_use.add(started.container_id)
        return started

    def finished(self, started: Started) -> None:
        """A taken container's command has ended (its container is removed
        as any command's is)."""
        with self._lock:
            self._in_use.discard(started.container_id)

    def expire(self) -> None:
        """Removes the containers that waited longer than the idle time."""
        cutoff = time.monotonic() - self._idle_s
        self._drop(lambda started: started.at < cutoff, "idle")

    def keep_only(self, image: str) -> None:
        """After a promotion: containers of another image will not be used."""
        self._drop(lambda started: started.image != image, "promotion")

    def reap(self, ended: Callable[[list[str]], set[str]]) -> list[str]:
        """Removes warm containers on the engine that no pool holds (left by
        an earlier run, or by an executor that is gone); ``ended`` names
        those whose command has ended."""
        with self._lock:
            if self._starting:  # one being started is not held yet: next round
                return []
            keep = {started.container_id for started in self._held.values()} | self._in_use
        return self._sandbox.reap_warm(self._worker_id, keep, 2 * self._idle_s + 60, ended)

    def close(self) -> None:
        """On shutdown: nothing new starts, and every held container goes."""
        with self._lock:
            self._closed = True
        self._starter.shutdown(wait=True)
        self._drop(lambda _started: True, "shutdown")

    def _drop(self, which: Callable[[Started], bool], reason: str) -> None:
        with self._lock:
            dropped = [s for s in self._held.values() if which(s)]
            for started in dropped:
                del self._held[started.session_id]
        for started in dropped:
            self._waste(started, reason)

    def _waste(self, started: Started, reason: str) -> None:
        metrics.WARM_WASTED.labels(reason).inc()
        log.info("removed unused warm container_id=%s session_id=%s: %s",
                 started.container_id[:12], started.session_id, reason)
        self._sandbox.discard(started)
