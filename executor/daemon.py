"""`pg-shell executor`: builds the worker from the settings, wires signals and
systemd notification, and runs until SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

import sdnotify

from executor import metrics
from executor.config import Settings
from executor.worker.loop import Worker
from executor.worker.metrics_server import serve_executor_metrics

log = logging.getLogger(__name__)


def systemd_notifier() -> Callable[[str], None]:
    """READY/WATCHDOG/STOPPING for a Type=notify unit; nothing without one."""
    if not os.environ.get("NOTIFY_SOCKET"):
        return lambda _: None
    notifier = sdnotify.SystemdNotifier()

    def notify(state: str) -> None:
        notifier.notify(state)

    return notify


def warn_without_disk_quota(settings: Settings) -> None:
    """Said at every start, because nothing else bounds a tenant's files then."""
    if settings.disk_quota == "none":
        log.warning("PG_SHELL_DISK_QUOTA=none: session homes have no disk quota, so one tenant "
                    "can fill the engine's disk for everyone. Not for untrusted tenants: use "
                    "PG_SHELL_DISK_QUOTA=loop (docs/operations.md, \"Which engine\").")


def run_executor(settings: Settings) -> int:
    warn_without_disk_quota(settings)
    stop = threading.Event()
    worker = Worker(settings, settings.sandbox(), stop, notify=systemd_notifier())

    def request_stop(signum: int, _frame: object) -> None:
        log.info("%s: no new commands; draining", signal.Signals(signum).name)
        stop.set()
        worker.wake()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    metrics.RUNNING.set_function(worker.running)
    serve_executor_metrics(settings, stop)
    worker.run()
    return 0
