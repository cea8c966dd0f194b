"""The gateway's /metrics: its registry in Prometheus' text format, and the
queue depth, read from the database every PG_SHELL_METRICS_INTERVAL_S."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from executor import metrics
from executor.db.gateway import GatewayDatabase
from executor.errors import PgShellError

log = logging.getLogger(__name__)


async def metrics_endpoint(_request: Request) -> Response:
    return Response(generate_latest(metrics.GATEWAY), media_type=CONTENT_TYPE_LATEST)


async def read_queue_depth(db: GatewayDatabase, interval_s: float) -> None:
    """Runs until cancelled; an outage leaves the gauge at its last value."""
    while True:
        try:
            metrics.GATEWAY_QUEUE_DEPTH.set(await run_in_threadpool(db.queue_depth))
        except PgShellError as exc:
            log.warning("queue depth not read: %s", exc)
        await asyncio.sleep(interval_s)
