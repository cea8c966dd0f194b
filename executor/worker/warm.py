"""Warm starts (DESIGN.md §10): after a session's command completes here,
its next containers are created and started ahead of time, so the next
command is handed over stdin instead of waiting for a container start. A
warm container runs one command at most and is never reused; the pool is
bounded in number and idle time, and what it removes unused is counted as
wasted, by reason.

A session holds up to ``per_session`` of them, one started after the other
(their home is the session's one volume, so each sees the files as they
are when it is handed a command). With two, a command typed right after
the previous one's output finds a container ready. The one taken is
replaced once its command ended if the session still holds another (a
start beside the command would compete with it for the host's CPU, and
the next command has its container already); at once if it holds none,
or if the one taken could not run the command (of another image or
runtime, or dead: so is the other, most likely).

The pool is shared by every tenant, so one user's sessions hold at most
``per_user`` of its places: a tenant running commands in many sessions
(each completion asks for a warm start) cannot keep the pool full and
leave everybody else's next command cold.

A session that has no copy here (a new one) cannot have a container
started for it before its copy is made; ``blanks`` keeps one started on a
blank copy, which such a session takes instead (blank_start.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from executor import metrics
from executor.errors import PgShellError
from executor.sandbox import Sandbox, SandboxError, Started

from .blank_start import BlankStart

log = logging.getLogger(__name__)
# How long a command waits for its session's warm container being started
# (cancel and shutdown wait as long); past it (an engine this slow, or an
# older volume being handed over), the command starts one of its own.
TAKE_WAIT_S = 10.0


@dataclass(frozen=True)
class Adoption:
    """A session this host adopted for a warm start: its user, the
    image of its template on this host, and its user's runtime (None: the
    executor's default)."""

    user_id: str
    image: str
    runtime: str | None


class WarmPool:
    def __init__(self, sandbox: Sandbox, worker_id: str, max_count: int, idle_s: float,
                 per_user: int | None = None, per_session: int = 1,
                 blanks: BlankStart | None = None) -> None:
        self._sandbox = sandbox
        self._blanks = blanks or BlankStart(sandbox, worker_id, lambda: None, enabled=False)
        self._worker_id = worker_id
        self._max = max_count
        self._per_user = max_count if per_user is None else per_user
        self._per_session = per_session
        self._idle_s = idle_s
        # The user of each session queued, starting or held (None: not known
        # yet, an adoption before its claim), and whether its files are in
        # the database (only then may its host copy be evicted).
        self._users: dict[str, tuple[str | None, bool]] = {}
        self._held: dict[str, list[Started]] = {}  # by session id, oldest first
        self._queued: set[str] = set()  # reserved, waiting for the starter
        # A replacement put off until its command ended: session -> (image, runtime).
        self._owed: dict[str, tuple[str, str]] = {}
        # Being started now; the event is set once the start has ended (its
        # container held, or none).
        self._starting: dict[str, threading.Event] = {}
        self._in_use: set[str] = set()  # ids of taken containers whose command still runs
        # Archived sessions, and when: a start under way for one ends in its
        # container going, and none follows it, until a command of the
        # session is taken here again (it was unarchived) or the idle time
        # has passed.
        self._retired: dict[str, float] = {}
        self._lock = threading.Lock()
        self._closed = False
        # One starter: warm starts must not compete with claimed commands'
        # starts for the engine more than that.
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="warm")
        metrics.WARM_CONTAINERS.set_function(self.count)

    def count(self) -> int:
        with self._lock:
            return self._held_count()

    def _held_count(self) -> int:
        return sum(len(started) for started in self._held.values())

    def prepare(self, session_id: str, image: str, user_id: str | None = None,
                stored: bool = False, runtime: str | None = None) -> None:
        """Starts the session's next container on ``image`` under
        ``runtime`` (None: the sandbox's default) in the background, unless
        it holds its part already or one is starting, or the pool (or the
        user's part) is full; once it is held, the next, up to
        ``per_session``. ``stored``: the session's files are in the database."""
        with self._lock:
            self._owed.pop(session_id, None)  # asked for now
        if self._reserve(session_id, user_id, stored):
            self._starter.submit(self._start, session_id, image, runtime)

    def ended(self, session_id: str) -> None:
        """The session's command is over, however it ended: the replacement
        its take put off starts now, unless its completion asked for it."""
        with self._lock:
            owed = self._owed.pop(session_id, None)
        if owed is not None:
            self.prepare(session_id, owed[0], runtime=owed[1])
        self._blanks.refill()

    def adopt(self, session_id: str, claim: Callable[[str], Adoption | None]) -> None:
        """A new session, or one a client opened: if this executor is the
        host claiming prefers for it, or becomes it (``claim``, which names
        the session's user and the image of its template here then), the
        session's next container starts now, before its command exists."""
        if self._has(session_id):
            # Its container is here already: take the request all the same,
            # so that no other executor of this host starts a second one.
            self._starter.submit(self._take_request, session_id, claim)
        elif self._reserve(session_id, None, True):
            self._starter.submit(self._start, session_id, None, None, claim)

    def _has(self, session_id: str) -> bool:
        with self._lock:
            return (session_id in self._held or session_id in self._queued
                    or session_id in self._starting)

    def _reserve(self, session_id: str, user_id: str | None, stored: bool) -> bool:
        with self._lock:
            return self._reserve_locked(session_id, user_id, stored)

    def _reserve_locked(self, session_id: str, user_id: str | None, stored: bool) -> bool:
        busy = self._held_count() + len(self._queued) + len(self._starting)
        if user_id is None:  # a start that follows one: the session's user as known
            user_id, stored = self._users.get(session_id, (None, stored))
        if (self._closed or session_id in self._retired
                or session_id in self._queued or session_id in self._starting
                or len(self._held.get(session_id, ())) >= self._per_session
                or busy >= self._max or not self._room_for(user_id)):
            return False
        self._queued.add(session_id)
        self._users[session_id] = (user_id, stored)
        return True

    def _room_for(self, user_id: str | None) -> bool:
        """Under the lock: whether the user's sessions hold fewer containers
        (held, queued or starting) than their part."""
        if user_id is None:
            return True
        mine = sum(len(self._held.get(session, ())) + (session in self._queued)
                   + (session in self._starting)
                   for session, (user, _) in self._users.items() if user == user_id)
        return mine < self._per_user

    def _start(self, session_id: str, image: str | None, runtime: str | None,
               claim: Callable[[str], Adoption | None] | None = None) -> None:
        """Starts the queued container on ``image`` under ``runtime``, or,
        with ``claim``, on the image and runtime the adoption names."""
        if not self._begin(session_id):
            return
        started = None
        follows = False
        try:
            if claim is not None:
                adoption = self._adopted(session_id, claim)
                image, runtime = (adoption.image, adoption.runtime) if adoption else (None, None)
            if image is None:
                return
            user_id, stored = self._users.get(session_id, (None, False))
            started = self._warm(session_id, image, runtime, user_id if stored else None)
        finally:
            follows = self._end(session_id, started)
        if follows and started is not None:
            self._starter.submit(self._start, session_id, image, started.runtime)

    @staticmethod
    def _take_request(session_id: str, claim: Callable[[str], Adoption | None]) -> None:
        try:
            claim(session_id)
        except PgShellError as exc:
            log.warning("could not adopt session_id=%s: %s", session_id, exc)

    def _adopted(self, session_id: str,
                 claim: Callable[[str], Adoption | None]) -> Adoption | None:
        """Adopts the session: what its container starts on; None if
        another host has it, or if its user already holds their part of the
        pool (the adoption stands: the session's next command starts its own
        container here)."""
        try:
            adoption = claim(session_id)
        except PgShellError as exc:
            log.warning("could not adopt session_id=%s: %s", session_id, exc)
            return None
        if adoption is None:
            return None
        with self._lock:
            if not self._room_for(adoption.user_id):
                log.info("no warm container for session_id=%s: its user holds %d",
                         session_id, self._per_user)
                return None
            self._users[session_id] = (adoption.user_id, True)
        return adoption

    def _begin(self, session_id: str) -> bool:
        """A queued start begins, unless a command took its place meanwhile."""
        with self._lock:
            if session_id not in self._queued:
                return False
            self._queued.discard(session_id)
            if self._closed:
                self._forget_if_idle(session_id)
                return False
            self._starting[session_id] = threading.Event()
            return True

    def _warm(self, session_id: str, image: str, runtime: str | None,
              owner: str | None) -> Started | None:
        try:
            # The copy is in use from before its volume is made until the
            # container holds it: never evicted in between (host_copies.py).
            with self._sandbox.volumes.hold(session_id, owner):
                return (self._blank_for(session_id, image, runtime)
                        or self._sandbox.warm(session_id, self._worker_id, image, runtime))
        except SandboxError as exc:
            log.warning("no warm container for session_id=%s: %s", session_id, exc)
        except Exception:
            # The starter's future would swallow it: say it, and go on.
            log.exception("warm start failed for session_id=%s", session_id)
        return None

    def _end(self, session_id: str, started: Started | None) -> bool:
        """The start is over: its container is held, and the session's next
        one reserved in the same step if its part is not full (a command
        taking one in between would find another held, and put off a start
        that then happened beside it all the same). Whether it was."""
        follows = False
        with self._lock:
            done = self._starting.pop(session_id)
            unwanted = ("shutdown" if self._closed
                        else "archived" if session_id in self._retired else "")
            if started is not None and not unwanted:
                self._held.setdefault(session_id, []).append(started)
                follows = self._reserve_locked(session_id, None, False)
            self._forget_if_idle(session_id)
        if started is not None and unwanted:
            self._waste(started, unwanted)
        done.set()  # after it is held (or gone): a command waiting for it takes it now
        return follows

    def take(self, session_id: str, image: str, runtime: str) -> Started | None:
        """The session's warm container for a command on ``image`` under
        ``runtime``, if one
        is held and still waits, or, when none is, is being started now (it
        began before a start of the command's own could, and waiting for it
        costs less than a second start beside it on the engine); it leaves
        the pool (used once). One still queued is not started: the command
        starts its own at once."""
        with self._lock:
            self._retired.pop(session_id, None)  # it runs a command: not archived
            started = self._hand_out(session_id)
            another = session_id in self._held  # then the one taken is replaced once it ended
            if started is None and session_id in self._queued:
                self._queued.discard(session_id)
                self._forget_if_idle(session_id)
            starting = self._starting.get(session_id)
        if started is None and starting is not None:
            starting.wait(TAKE_WAIT_S)
            with self._lock:
                started = self._hand_out(session_id)
                another = session_id in self._held
        if started is None and (started := self._blank_for(session_id, image, runtime)):
            with self._lock:
                self._in_use.add(started.container_id)
        if started is None:
            metrics.WARM_MISSES.labels("none").inc()
            return None
        miss = self._miss(started, image, runtime)
        if miss or not another:  # the next command would wait for a start: begin it now
            self.prepare(session_id, image, runtime=runtime)
            with self._lock:
                self._forget_if_idle(session_id)
        else:
            with self._lock:
                self._owed[session_id] = (image, runtime)
        if miss:
            self._waste(started, miss)
            metrics.WARM_MISSES.labels(miss).inc()
            return None
        metrics.WARM_HITS.inc()
        return started

    def _blank_for(self, session_id: str, image: str, runtime: str | None) -> Started | None:
        """The blank container, if the session (having no copy here) can take it."""
        return self._blanks.take(session_id, image, runtime or self._sandbox.runtime)

    def _miss(self, started: Started, image: str, runtime: str) -> str | None:
        """Why a taken container cannot run a command on ``image`` under
        ``runtime`` (None: it can)."""
        if started.image != image:
            return "image"
        if started.runtime != runtime:  # the user was put on another runtime meanwhile
            return "runtime"
        if not self._sandbox.usable(started):
            return "dead"
        return None

    def _forget_if_idle(self, session_id: str) -> None:
        """Under the lock: a session with nothing held, queued or starting
        leaves the users' accounts."""
        if (session_id not in self._held and session_id not in self._queued
                and session_id not in self._starting):
            self._users.pop(session_id, None)

    def _hand_out(self, session_id: str) -> Started | None:
        """Under the lock: the session's oldest, from held to in use in one
        step, so reaping never sees a taken container in neither. The
        session's user stays known (prepare() fills its place)."""
        held = self._held.get(session_id)
        if not held:
            return None
        started = held.pop(0)
        self._in_use.add(started.container_id)
        if not held:
            del self._held[session_id]
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
        with self._lock:
            self._retired = {s: at for s, at in self._retired.items() if at >= cutoff}
        self._blanks.refill()  # none was started since the last command, or it failed

    def drop_session(self, session_id: str) -> None:
        """The session runs nothing more (archived): its containers go, the
        one being started too (waited for, so that its volume is free when
        this returns), and no other starts."""
        with self._lock:
            self._retired[session_id] = time.monotonic()
            self._queued.discard(session_id)
            self._forget_if_idle(session_id)
            starting = self._starting.get(session_id)
        if starting is not None:
            starting.wait(TAKE_WAIT_S)
        self._drop(lambda started: started.session_id == session_id, "archived")

    def keep_only(self, images: set[str]) -> None:
        """After a promotion: containers of an image no template starts on will not be used."""
        self._drop(lambda started: started.image not in images, "promotion")
        self._blanks.keep_only(images)

    def reap(self, ended: Callable[[list[str]], set[str]]) -> list[str]:
        """Removes warm containers on the engine that no pool holds (left by
        an earlier run, or by an executor that is gone); ``ended`` names
        those whose command has ended."""
        with self._lock:
            if self._starting:  # one being started is not held yet: next round
                return []
            keep = {s.container_id for held in self._held.values() for s in held} | self._in_use
        blank = self._blanks.container_ids()
        if blank is None:  # being started: next round
            return []
        keep |= blank
        return self._sandbox.reap_warm(self._worker_id, keep, 2 * self._idle_s + 60, ended)

    def close(self) -> None:
        """On shutdown: nothing new starts, and every held container goes."""
        with self._lock:
            self._closed = True
        self._starter.shutdown(wait=True)
        self._drop(lambda _started: True, "shutdown")
        self._blanks.close()

    def _drop(self, which: Callable[[Started], bool], reason: str) -> None:
        with self._lock:
            dropped = [s for held in self._held.values() for s in held if which(s)]
            for started in dropped:
                held = self._held[started.session_id]
                held.remove(started)
                if not held:
                    del self._held[started.session_id]
                    self._forget_if_idle(started.session_id)
        for started in dropped:
            self._waste(started, reason)

    def _waste(self, started: Started, reason: str) -> None:
        metrics.WARM_WASTED.labels(reason).inc()
        log.info("removed unused warm container_id=%s session_id=%s: %s",
                 started.container_id[:12], started.session_id, reason)
        self._sandbox.discard(started)
        with self._lock:
            self._in_use.discard(started.container_id)  # taken, and found unusable
