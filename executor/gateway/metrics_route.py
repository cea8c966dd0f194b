"""The gateway's metrics: the queue depth, read from the database every
PG_SHELL_METRICS_INTERVAL_S into its registry, which is served on a port of
its own (PG_SHELL_GATEWAY_METRICS_PORT, metrics.serve_metrics),
never on the public origin."""

from __future__ import annotations

import asyncio
import logging

from starlette.concurrency import run_in_threadpool

from executor import metrics
from executor.db.gateway import GatewayDatabase
from executor.errors import PgShellError

log = logging.getLogger(__name__)


async def read_queue_depth(db: GatewayDatabase, interval_s: float) -> None:
    """Runs until cancelled; an outage leaves the gauge at its last value."""
    while True:
        try:
            metrics.GATEWAY_QUEUE_DEPTH.set(await run_in_threadpool(db.queue_depth))
        except PgShellError as exc:
            log.warning("queue depth not read: %s", exc)
        await asyncio.sleep(interval_s)
