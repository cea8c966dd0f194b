"""A container started ahead for the next new session (DESIGN.md §10):
a warm start needs the session's copy, and a new session has none, so
its first command used to wait for the copy and the container to be
made. One container is kept started on a blank copy (sandbox/
blank_copies.py) of this host's default image and runtime; the first
new session that wants a container here takes it (its copy becomes the
session's, as one made for it would be), and the next is started once a
command ended or at the next maintenance round, not beside the command
it serves. Loop volumes only: a plain volume cannot be handed to a
session under its name.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from executor import metrics
from executor.sandbox import Blank, Sandbox, SandboxError, Started

log = logging.getLogger(__name__)


class BlankStart:
    def __init__(self, sandbox: Sandbox, worker_id: str, image: Callable[[], str | None],
                 enabled: bool) -> None:
        self._sandbox = sandbox
        self._worker_id = worker_id
        self._image = image  # the default image now (None: not known yet)
        self._enabled = enabled
        self._blank: Blank | None = None
        self._making = False  # one is being started
        self._taking = False  # one is being handed to a session (it may stay)
        self._closed = False
        self._lock = threading.Lock()
        self._maker = ThreadPoolExecutor(1, thread_name_prefix="blank")

    def take(self, session_id: str, image: str, runtime: str) -> Started | None:
        """The waiting blank container as the session's, when it is on
        ``image`` under ``runtime`` and the session has no copy here."""
        with self._lock:
            blank = self._blank
            if (blank is None or self._taking or blank.started.image != image
                    or blank.started.runtime != runtime):
                return None
            self._blank, self._taking = None, True
        failed = False
        started = None
        try:
            started = self._sandbox.adopt_blank(blank, session_id)
        except (SandboxError, OSError) as exc:
            log.warning("blank container not taken by session_id=%s: %s", session_id, exc)
            failed = True
        finally:
            with self._lock:
                self._taking = False
                # Not taken (the session has a copy here): it waits on.
                kept = started is None and not failed and not self._closed
                if kept:
                    self._blank = blank
        if started is None:
            if not kept:
                self._discard(blank, "failed" if failed else "shutdown")
            return None
        log.info("session_id=%s took blank container_id=%s", session_id,
                 started.container_id[:12])
        return started

    def refill(self) -> None:
        """Starts the next blank container in the background, unless one
        waits or is being started."""
        with self._lock:
            if (not self._enabled or self._closed or self._blank is not None or self._making
                    or self._taking):
                return
            self._making = True
        self._maker.submit(self._make)

    def _make(self) -> None:
        blank = None
        try:
            image = self._image()
            if image is not None:
                blank = self._sandbox.blank(self._worker_id, image)
        except SandboxError as exc:
            log.warning("no blank container: %s", exc)
        except Exception:
            log.exception("blank container start failed")  # the pool's thread would swallow it
        finally:
            with self._lock:
                self._making = False
                if blank is not None and not self._closed:
                    self._blank, blank = blank, None
        if blank is not None:
            self._discard(blank, "shutdown")

    def container_ids(self) -> set[str] | None:
        """The blank container's id (None: one is being started or handed
        over, and is in neither place: ask again later)."""
        with self._lock:
            if self._making or self._taking:
                return None
            return {self._blank.started.container_id} if self._blank is not None else set()

    def keep_only(self, images: set[str]) -> None:
        """After a promotion: a blank of an image no template starts on goes
        (the next is started on the new default)."""
        self._drop(lambda blank: blank.started.image not in images, "promotion")

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._maker.shutdown(wait=True)
        self._drop(lambda _blank: True, "shutdown")

    def _drop(self, which: Callable[[Blank], bool], reason: str) -> None:
        with self._lock:
            blank = self._blank if self._blank is not None and which(self._blank) else None
            if blank is not None:
                self._blank = None
        if blank is not None:
            self._discard(blank, reason)

    def _discard(self, blank: Blank, reason: str) -> None:
        metrics.WARM_WASTED.labels(reason).inc()
        log.info("removed blank container_id=%s: %s", blank.started.container_id[:12], reason)
        try:
            self._sandbox.discard_blank(blank)
        except SandboxError as exc:  # the next blank's sweep removes its copy
            log.warning("blank copy %s not removed: %s", blank.copy.volume, exc)
