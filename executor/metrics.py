"""Prometheus metrics: what the executor and the gateway count, each in its
own registry (a process serves only its own on /metrics), and the few
helpers that update and serve them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

from executor.errors import PgShellError

log = logging.getLogger(__name__)

EXECUTOR = CollectorRegistry()
GATEWAY = CollectorRegistry()
for _registry in (EXECUTOR, GATEWAY):
    ProcessCollector(registry=_registry)
    PlatformCollector(registry=_registry)

# Claim to start is mostly container creation; a run is whatever the tenant typed.
_START_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
_RUN_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)

# -- the executor -----------------------------------------------------------------

COMMANDS_COMPLETED = Counter(
    "pg_shell_commands_completed", "Commands this executor ended, by final status and reason",
    ["status", "reason"], registry=EXECUTOR)
CLAIM_TO_START = Histogram(
    "pg_shell_command_claim_to_start_seconds", "From claiming a command to its container running",
    buckets=_START_BUCKETS, registry=EXECUTOR)
RUN_TIME = Histogram(
    "pg_shell_command_run_seconds", "How long commands ran in their containers",
    buckets=_RUN_BUCKETS, registry=EXECUTOR)
OUTPUT_BYTES = Counter(
    "pg_shell_output_bytes", "Output bytes (UTF-8) stored for commands", registry=EXECUTOR)
CONTAINER_START_FAILURES = Counter(
    "pg_shell_container_start_failures", "Commands whose container could not be started",
    registry=EXECUTOR)
RUNNING = Gauge(
    "pg_shell_commands_running", "Commands running in containers of this executor now",
    registry=EXECUTOR)
QUEUE_DEPTH = Gauge(
    "pg_shell_queue_depth", "Pending commands of all tenants, as last read from the database",
    registry=EXECUTOR)
TENANT_COMMANDS = Counter(
    "pg_shell_tenant_commands", "Commands this executor ended, by user id", ["user_id"],
    registry=EXECUTOR)
TENANT_RUN_SECONDS = Counter(
    "pg_shell_tenant_run_seconds", "Seconds commands ran in containers, by user id", ["user_id"],
    registry=EXECUTOR)

WARM_CONTAINERS = Gauge(
    "pg_shell_warm_containers", "Warm containers this executor holds now (started, waiting)",
    registry=EXECUTOR)
WARM_HITS = Counter(
    "pg_shell_warm_hits", "Commands handed to a warm container", registry=EXECUTOR)
WARM_MISSES = Counter(
    "pg_shell_warm_misses", "Commands that started a container of their own, by why: none "
    "(no warm one held), image (held for another image), runtime (held under another runtime), "
    "dead (it had stopped)", ["reason"],
    registry=EXECUTOR)
WARM_WASTED = Counter(
    "pg_shell_warm_wasted", "Warm containers removed unused, by why: idle, promotion, image, "
    "runtime, dead, shutdown; a blank one (for new sessions) also failed (its copy could not be "
    "handed to the session)", ["reason"], registry=EXECUTOR)

CAPTURE_SCANS = Counter(
    "pg_shell_capture_scans", "Captures after a command, by what their scan walked: changed "
    "(the directories the kernel's change record named) or home (the whole home)", ["walk"],
    registry=EXECUTOR)
CAPTURE_FILES = Counter(
    "pg_shell_capture_files", "Changed files captures read, by where: host (where this host "
    "mounts the session's copy) or sandbox (sent by the container's supervisor)", ["via"],
    registry=EXECUTOR)
CAPTURE_LISTED = Counter(
    "pg_shell_capture_directories_listed", "Directories the captures' scans sent entry by entry "
    "(the others were found as this host's index holds them)", registry=EXECUTOR)

# -- the gateway -------------------------------------------------------------------

GATEWAY_REQUESTS = Counter(
    "pg_shell_gateway_requests", "Calls of /rpc/<function>, by function and HTTP status",
    ["function", "status"], registry=GATEWAY)
GATEWAY_QUEUE_DEPTH = Gauge(
    "pg_shell_queue_depth", "Pending commands of all tenants, as last read from the database",
    registry=GATEWAY)


def reason_label(reason: str | None) -> str:
    """A bounded label: engine errors carry the engine's message after a colon."""
    return (reason or "none").split(":", 1)[0].strip() or "none"


def command_started(seconds_since_claim: float) -> None:
    CLAIM_TO_START.observe(max(0.0, seconds_since_claim))


def command_completed(user_id: str, status: str, reason: str | None,
                      duration_ms: int | None) -> None:
    COMMANDS_COMPLETED.labels(status, reason_label(reason)).inc()
    TENANT_COMMANDS.labels(str(user_id)).inc()
    if duration_ms is not None:
        RUN_TIME.observe(duration_ms / 1000)
        TENANT_RUN_SECONDS.labels(str(user_id)).inc(duration_ms / 1000)


def counting_output(flush: Callable[[int, str, bool], None]) -> Callable[[int, str, bool], None]:
    """``flush`` (seq, text, notify), counting the bytes of each chunk it stored."""
    def counted(seq: int, data: str, notify: bool) -> None:
        flush(seq, data, notify)
        OUTPUT_BYTES.inc(len(data.encode("utf-8")))
    return counted


def gateway_request(function: str, status: int) -> None:
    GATEWAY_REQUESTS.labels(function, str(status)).inc()


def serve_metrics(host: str, port: int, registry: CollectorRegistry, variable: str) -> bool:
    """Serves ``registry`` at http://host:port/metrics from a thread; False if
    ``port`` is 0 or taken (commands and requests are served all the same:
    metrics are not worth an outage). ``variable`` names the port's setting."""
    if port == 0:
        log.info("metrics are off (%s=0)", variable)
        return False
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.error("metrics not served: cannot listen on %s:%s: %s (set %s)",
                  host, port, exc, variable)
        return False
    log.info("metrics on http://%s:%s/metrics", host, port)
    return True


def follow(gauge: Gauge, read: Callable[[], float], interval_s: float,
           stop: threading.Event) -> None:
    """Sets ``gauge`` from ``read`` every ``interval_s`` (the queue depth,
    read from the database) in a thread, until ``stop``; an outage leaves
    the gauge at its last value."""
    def sample() -> None:
        while True:
            try:
                gauge.set(read())
            except PgShellError as exc:
                log.warning("%s not read: %s", gauge._name, exc)
            if stop.wait(interval_s):
                return
    threading.Thread(target=sample, name=f"metrics {gauge._name}", daemon=True).start()
