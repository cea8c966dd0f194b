"""LISTEN on one connection of a Database: the executor follows its
channels (commands, cancels, sessions, input) and the gateway the changes
its long-polls wait for. NOTIFY is only a hint: a connection lost drops the
notifications sent meanwhile, so listeners also poll, or re-read their
state when ``on_listen`` says they listen again."""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Callable, Iterator, Sequence

from executor.db.connection import query, translated_errors
from executor.db.database import Database
from executor.errors import DatabaseError

log = logging.getLogger(__name__)


class Listener:
    def __init__(self, db: Database, channels: Sequence[str],
                 on_listen: Callable[[], None] = lambda: None) -> None:
        self._db = db
        self._channels = channels
        self._on_listen = on_listen  # after each LISTEN: what came before may be missed
        self._listening = False

    def start(self) -> None:
        """LISTEN now (an executor does before it says it is ready, so what
        is announced after that, a session to warm, is not missed)."""
        self._listen()

    def _listen(self) -> None:
        if not self._listening:
            query(self._db.connection(), "; ".join(f"LISTEN {c}" for c in self._channels))
            self._listening = True
            self._on_listen()

    def wait(self, timeout: float, wake_fd: int | None = None) -> Iterator[tuple[str, str]]:
        """Yields (channel, payload) of notifications that arrive within
        ``timeout`` seconds; returns early on the first batch or when
        ``wake_fd`` becomes readable. While the database is away, it waits
        out the timeout and tries again on the next call."""
        try:
            self._listen()
            conn = self._db.connection()
            if not conn.notifies:
                select.select([conn.fileno()] + ([] if wake_fd is None else [wake_fd]), [], [],
                              timeout)
                with translated_errors():
                    conn.poll()
        except (DatabaseError, OSError) as exc:
            log.warning("listen connection lost, polling meanwhile: %s", exc)
            self.close()
            if wake_fd is None:
                time.sleep(timeout)
            else:
                select.select([wake_fd], [], [], timeout)
            return
        while conn.notifies:
            note = conn.notifies.pop(0)
            yield note.channel, note.payload

    def close(self) -> None:
        self._db.close()
        self._listening = False
