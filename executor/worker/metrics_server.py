"""The executor's /metrics: prometheus_client's HTTP server on
PG_SHELL_METRICS_HOST:PG_SHELL_METRICS_PORT, and a thread that reads the
queue depth from the database every PG_SHELL_METRICS_INTERVAL_S."""

from __future__ import annotations

import logging
import threading

from prometheus_client import start_http_server

from executor import metrics
from executor.config import Settings
from executor.db.queue import ExecutorDatabase
from executor.errors import PgShellError

log = logging.getLogger(__name__)


def serve_executor_metrics(settings: Settings, stop: threading.Event) -> bool:
    """Starts serving; False if metrics are off or the port is taken (the
    executor runs commands all the same: metrics are not worth an outage)."""
    if settings.metrics_port == 0:
        log.info("metrics are off (PG_SHELL_METRICS_PORT=0)")
        return False
    try:
        start_http_server(settings.metrics_port, addr=settings.metrics_host,
                          registry=metrics.EXECUTOR)
    except OSError as exc:
        log.error("metrics not served: cannot listen on %s:%s: %s (set PG_SHELL_METRICS_PORT)",
                  settings.metrics_host, settings.metrics_port, exc)
        return False
    log.info("metrics on http://%s:%s/metrics", settings.metrics_host, settings.metrics_port)
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
