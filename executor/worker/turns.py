"""One command of a session at a time on this host, start to end.

The database frees a session's lane when its command completes, and the
executor commits its index of the session's copy (workspace/cache.py) just
after that: completing first keeps the index's write off the command's
latency. A next command claimed in between must not read the index before
that commit, or it finds the copy untrusted and restores all of it (12 s
for a 50,000-file home). So its turn starts when the last one's ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class SessionTurns:
    """A lock per session, kept only while a command holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._turns: dict[str, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def turn(self, session_id: str) -> Iterator[None]:
        """Waits for the session's command before, then runs the block."""
        with self._guard:
            lock, waiting = self._turns.get(session_id, (threading.Lock(), 0))
            self._turns[session_id] = (lock, waiting + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                waiting = self._turns[session_id][1] - 1
                if waiting:
                    self._turns[session_id] = (lock, waiting)
                else:
                    del self._turns[session_id]

    def __len__(self) -> int:
        """Sessions with a command in its turn or waiting for it."""
        with self._guard:
            return len(self._turns)
