"""`pg-shell cleanup`: the housekeeping daemon (executor/cleanup.py)."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from executor.cli import Commands
from executor.config import Settings

log = logging.getLogger(__name__)


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "cleanup", help="run the housekeeping daemon (retention, idle volumes)",
        description="Remove ended commands older than PG_SHELL_RETENTION_DAYS (default 90; never "
                    "pending or running ones; chains stay verifiable from a signed checkpoint), "
                    "delete the volumes of sessions idle past PG_SHELL_VOLUME_IDLE_DAYS and detach "
                    "loop devices idle past PG_SHELL_LOOP_IDLE_MINUTES. Runs a round every "
                    "PG_SHELL_CLEANUP_INTERVAL_S on the host of the Docker engine, waiting out "
                    "outages; --once runs one round and exits non-zero if it failed.")
    parser.add_argument("--once", action="store_true",
                        help="one round, then exit (cron, systemd timers)")
    parser.add_argument("--no-volumes", action="store_true",
                        help="retention only (a host without the Docker engine)")
    parser.set_defaults(handler=cmd_cleanup)


def cmd_cleanup(args: argparse.Namespace, settings: Settings) -> int:
    from executor.cleanup import Cleanup  # imports docker: only when needed
    from executor.sandbox import SandboxError

    cleanup = Cleanup(settings, None if args.no_volumes else settings.sandbox())
    if args.once:
        try:
            cleanup.run_once()
        except SandboxError as exc:
            log.error("cleanup failed: %s", exc)
            return 1
        return 0
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.info("%s: cleanup stops", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    log.info("cleanup ready: a round every %.0fs", settings.cleanup_interval_s)
    cleanup.run_forever(stop)
    return 0
