"""Live updates: one LISTEN connection for the whole gateway, fanned out to
every waiting request by session id."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict

from executor.db.gateway import listen_forever

CHANNEL = "shell_changes"


class ChangeFeed:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=listen_forever,
                         args=(self._dsn, CHANNEL, self._deliver, self._stop),
                         name="change-feed", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _deliver(self, session_id: str) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake, session_id)

    def _wake(self, session_id: str) -> None:
        # An empty payload (a reconnect) may have hidden changes: wake everyone.
        groups = (self._waiters.values() if not session_id
                  else [self._waiters.get(session_id, set())])
        for group in groups:
            for event in group:
                event.set()

    def subscribe(self, session_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._waiters[session_id].add(event)
        return event

    def unsubscribe(self, session_id: str, event: asyncio.Event) -> None:
        group = self._waiters.get(session_id)
        if group is not None:
            group.discard(event)
            if not group:
                del self._waiters[session_id]
