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
from executor.db.queue import ExecutorDatabase, queue_depth
from executor.worker.loop import Worker

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


def serve_executor_metrics(settings: Settings, stop: threading.Event) -> None:
    """/metrics on PG_SHELL_METRICS_HOST:PG_SHELL_METRICS_PORT, with the queue
    depth read every PG_SHELL_METRICS_INTERVAL_S (off when the port is 0)."""
    if metrics.serve_metrics(settings.metrics_host, settings.metrics_port, metrics.EXECUTOR,
                             "PG_SHELL_METRICS_PORT"):
        db = ExecutorDatabase(settings.require_database_url(), settings.executor_role,
                              name="pg-shell-executor metrics", persistent=False)
        metrics.follow(metrics.QUEUE_DEPTH, lambda: queue_depth(db), settings.metrics_interval_s,
                       stop)


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
