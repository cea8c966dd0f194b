"""The executor's /metrics: prometheus_client's HTTP server on
PG_SHELL_METRICS_HOST:PG_SHELL_METRICS_PORT, and a thread that reads the
queue depth from the database every PG_SHELL_METRICS_INTERVAL_S. The
gateway serves its own registry the same way (`metrics.serve_metrics`), on
a port of its own, off the public origin."""

from __future__ import annotations

import logging
import threading

from executor import metrics
from executor.config import Settings
from executor.db.queue import ExecutorDatabase
from executor.errors import PgShellError

log = logging.getLogger(__name__)


def serve_executor_metrics(settings: Settings, stop: threading.Event) -> bool:
    """Starts serving the executor's metrics; False if they are off or the
    port is taken."""
    if not metrics.serve_metrics(settings.metrics_host, settings.metrics_port, metrics.EXECUTOR,
                                 "PG_SHELL_METRICS_PORT"):
        return False
    db = ExecutorDatabase(settings.require_database_url(), settings.executor_role,
                          name="pg-shell-executor metrics", persistent=False)
    threading.Thread(target=_read_queue_depth, args=(db, settings.metrics_interval_s, stop),
                     name="metrics", daemon=True).start()
    return True


def _read_queue_depth(db: ExecutorDatabase, interval_s: float, stop: threading.Event) -> None:
    while True:
        try:
            metrics.QUEUE_DEPTH.set(db.queue_depth())
        except PgShellError as exc:  # an outage: the gauge keeps its last value
            log.warning("queue depth not read: %s", exc)
        if stop.wait(interval_s):
            db.close()
            return
