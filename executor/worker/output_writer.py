"""Streams a command's output into the database while it runs: pieces are
batched and flushed every few tens of milliseconds, each batch an output
chunk with the next sequence number (so a retry never duplicates one).
The writer also hashes exactly the text it stored, for the result record,
and masks the values of the command's secrets before anything is stored.

Listeners (the gateway's change feed) are woken at most once per notify
interval, not once per flush: a chunk stored within the interval of the last
notification is stored quietly, and the writer announces it when the
interval has passed, even if no more output comes (DESIGN.md §12)."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable

from executor.errors import PgShellError
from executor.secrets.mask import SecretMask

log = logging.getLogger(__name__)


class OutputWriter:
    def __init__(self, flush: Callable[[int, str, bool], None], interval_s: float,
                 announce: Callable[[], None] | None = None,
                 notify_interval_s: float = 0.0, eager: bool = False,
                 mask: SecretMask | None = None) -> None:
        """``flush(seq, text, notify)`` stores a chunk (waking listeners if
        ``notify``); ``announce()`` wakes them for chunks stored quietly.
        ``eager``: output is flushed and announced as soon as it comes (a
        terminal's echo must not wait for batching made for throughput;
        what comes during a flush still makes one batch). ``mask``: the
        secret values to mask, across pieces too."""
        self._mask = mask
        self._eager = threading.Event()
        if eager:
            interval_s = notify_interval_s = 0.0
        self._flush = flush
        self._interval_s = interval_s
        self._announce = announce
        self._notify_interval_s = notify_interval_s if announce is not None else 0.0
        self._notified_at = float("-inf")
        self._unannounced = False
        self._pending: list[str] = []
        self._lock = threading.Lock()
        self._seq = 0
        self._sha256 = hashlib.sha256()
        self._closed = threading.Event()
        # Flushing runs in its own thread so quiet output still reaches the
        # database within one interval.
        self._thread = threading.Thread(target=self._loop, name="output-writer", daemon=True)
        self._thread.start()

    def write(self, text: str) -> None:
        if text:
            with self._lock:
                self._pending.append(self._mask.feed(text) if self._mask else text)
            if self._interval_s == 0.0:
                self._eager.set()

    def _drain(self) -> None:
        with self._lock:
            data, self._pending = "".join(self._pending), []
        if data:
            # NUL is valid output but cannot be stored in a PostgreSQL text
            # value; replaced here, where it is hashed, so the two agree.
            data = data.replace("\x00", "\ufffd")
            notify = self._due()
            self._flush(self._seq, data, notify)
            self._sha256.update(data.encode("utf-8"))
            self._seq += 1
            self._noted(notify)
        elif self._unannounced and self._due():
            assert self._announce is not None
            self._announce()
            self._noted(True)

    def _due(self) -> bool:
        return time.monotonic() - self._notified_at >= self._notify_interval_s

    def _noted(self, notified: bool) -> None:
        if notified:
            self._notified_at = time.monotonic()
        self._unannounced = not notified

    @property
    def output_sha256(self) -> str:
        """sha256 (hex) of the concatenation of every chunk flushed so far."""
        return self._sha256.hexdigest()

    def _loop(self) -> None:
        while True:
            if self._interval_s == 0.0:
                self._eager.wait()
                self._eager.clear()
            if self._closed.wait(self._interval_s):
                return
            try:
                self._drain()
            except PgShellError as exc:  # the lease is gone; the worker settles that
                log.warning("output not saved: %s", exc)
                return

    def close(self) -> None:
        """Stops the flusher and writes what is left, announced (capturing
        the files may hold the completion back)."""
        self._closed.set()
        self._eager.set()
        self._thread.join()
        if self._mask is not None:
            self._pending.append(self._mask.flush())
        self._notify_interval_s = 0.0
        self._drain()
