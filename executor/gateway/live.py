"""Live updates (DESIGN.md §12): one LISTEN connection for the whole gateway,
fanned out by session id to the long-polls waiting on it.

What a long-poll costs the database is bounded by the changes, not by the
waiters:
- a long-poll ends as soon as its client goes away (it watches the
  connection while it waits), so abandoned polls cost nothing;
- waiters are capped per user and overall (429 with Retry-After beyond);
- identical requests of one user read once: a read already under way that
  started after the session's latest notification is joined, not repeated,
  so N tabs following one session cost one read per change;
- a cursor past the session's newest change is clamped to it (read with
  session_cursor when the first read comes back empty), so such a poll ends
  at the next change instead of waiting for one that never comes;
- executors coalesce their notifications (a streaming command wakes
  listeners a few times a second, not once per output flush).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from executor.db.database import Database
from executor.db.listener import Listener

CHANNEL = "shell_changes"
RETRY_AFTER_S = 2
T = TypeVar("T")


class TooManyWaiters(Exception):
    """A long-poll past a cap: answer 429 with Retry-After."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.retry_after = RETRY_AFTER_S


class ChangeFeed:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        # Per followed session, the tick of its latest notification (or of its
        # first subscription): a read started at that tick has seen it.
        self._versions: dict[str, int] = {}
        self._ticks = itertools.count(1)
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._listen, name="change-feed", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _listen(self) -> None:
        # (Re)listening may have missed changes: an empty payload wakes everyone.
        listener = Listener(Database(self._dsn, None, name="pg-shell-gateway listen",
                                     persistent=False), (CHANNEL,), lambda: self._deliver(""))
        while not self._stop.is_set():
            for _channel, session_id in listener.wait(1.0):
                self._deliver(session_id)
        listener.close()

    def _deliver(self, session_id: str) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake, session_id)

    def _wake(self, session_id: str) -> None:
        # An empty payload (a reconnect) may have hidden changes: wake everyone.
        sessions = list(self._waiters) if not session_id else [session_id]
        for session in sessions:
            group = self._waiters.get(session)
            if not group:
                continue
            self._versions[session] = next(self._ticks)
            for event in group:
                event.set()

    def version(self, session_id: str) -> int:
        return self._versions.get(session_id, 0)

    def subscribe(self, session_id: str) -> asyncio.Event:
        event = asyncio.Event()
        if not self._waiters[session_id]:
            self._versions[session_id] = next(self._ticks)
        self._waiters[session_id].add(event)
        return event

    def unsubscribe(self, session_id: str, event: asyncio.Event) -> None:
        group = self._waiters.get(session_id)
        if group is not None:
            group.discard(event)
            if not group:
                del self._waiters[session_id]
                self._versions.pop(session_id, None)

    @property
    def waiting(self) -> int:
        return sum(len(group) for group in self._waiters.values())


class LongPolls:
    """Long-polls on the change feed, within caps, reading once per change
    for identical requests."""

    def __init__(self, feed: ChangeFeed, max_waiters: int, max_per_user: int) -> None:
        self.feed = feed
        self.max_waiters = max_waiters
        self.max_per_user = max_per_user
        self._per_user: dict[str, int] = defaultdict(int)
        self._total = 0
        self._reads: dict[tuple[Hashable, int], asyncio.Future[Any]] = {}

    async def wait(self, session_id: str, user: str, key: Hashable, wait_s: float,
                   args: dict[str, Any], fetch_with: Callable[[dict[str, Any]], Callable[[], T]],
                   cursor: Callable[[], int], disconnected: Callable[[], Awaitable[None]]) -> T:
        """The first non-empty answer of ``fetch_with(args)()`` within
        ``wait_s`` seconds (else the last, empty one); ends early when
        ``disconnected()`` returns. ``cursor()`` reads the session's newest
        change, to clamp a p_after_change beyond it."""
        if self._total >= self.max_waiters:
            raise TooManyWaiters("too many requests are waiting for changes")
        if self._per_user[user] >= self.max_per_user:
            raise TooManyWaiters(f"more than {self.max_per_user} of your requests are waiting "
                                 "for changes")
        self._total += 1
        self._per_user[user] += 1
        deadline = time.monotonic() + wait_s
        # Subscribe before reading, so a change between the read and the
        # wait still wakes us.
        changed = self.feed.subscribe(session_id)
        gone = asyncio.ensure_future(disconnected())
        try:
            result = await self._read(key, session_id, fetch_with(args))
            if result:
                return result
            after = _integer(args.get("p_after_change"))
            if after:
                newest = await self._read(("cursor", user, session_id), session_id, cursor)
                if after > newest:
                    args = {**args, "p_after_change": newest}
                    key = (key, "clamped", newest)
            fetch = fetch_with(args)
            while not result:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or gone.done():
                    return result
                woke = asyncio.ensure_future(changed.wait())
                await asyncio.wait({woke, gone}, timeout=remaining,
                                   return_when=asyncio.FIRST_COMPLETED)
                woke.cancel()
                if not changed.is_set():
                    continue  # the deadline, or the client went away
                changed.clear()
                result = await self._read(key, session_id, fetch)
            return result
        finally:
            gone.cancel()
            self.feed.unsubscribe(session_id, changed)
            self._total -= 1
            self._per_user[user] -= 1
            if not self._per_user[user]:
                del self._per_user[user]

    async def _read(self, key: Hashable, session_id: str, fetch: Callable[[], T]) -> T:
        """``fetch()``, or the answer of the same read already under way
        since the session's latest change."""
        slot = (key, self.feed.version(session_id))
        pending = self._reads.get(slot)
        if pending is None:
            pending = asyncio.ensure_future(run_in_threadpool(fetch))
            self._reads[slot] = pending
            pending.add_done_callback(lambda _done: self._reads.pop(slot, None))
        result: T = await asyncio.shield(pending)
        return result


def _integer(value: Any) -> int | None:
    with contextlib.suppress(TypeError, ValueError):
        return int(value)
    return None
