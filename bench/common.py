"""What the benchmarks share: their output (one JSON object per line on
stdout, progress on stderr), percentiles, a scratch database migrated from
scratch, a tenant, the executor daemon (run as the tests run it: tests/daemon.py)
and the clean-up of what it left on the Docker engine.

Run a benchmark from the project root with the virtualenv's Python, e.g.
``.venv/bin/python -m bench.claim --help``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg2.extensions

from executor.db import migrations
from executor.db.connection import connect, query
from tests.daemon import Daemon, executor_env
from tests.fixtures_stack import Gateway
from tests.gateway.raw_http import rss_bytes
from tests.support import call, connect_as, one

REPO = Path(__file__).resolve().parents[1]
DEFAULT_IMAGE = "pg-shell-sandbox:latest"
TERMINAL = ("done", "failed", "cancelled")


# -- output ------------------------------------------------------------------------------


class Report:
    """One benchmark's output: figures as JSON lines on stdout, progress on stderr."""

    def __init__(self, bench: str) -> None:
        self.bench = bench

    def log(self, message: str) -> None:
        print(f"[bench/{self.bench} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr,
              flush=True)

    def figure(self, metric: str, value: float, unit: str, **extra: object) -> dict[str, Any]:
        """One figure, its value rounded to 4 places."""
        return {"bench": self.bench, "metric": metric, "value": round(value, 4), "unit": unit,
                **extra}

    def emit(self, record: Mapping[str, Any]) -> None:
        print(json.dumps({"bench": self.bench, **record}), flush=True)

    def emit_figure(self, metric: str, value: float, unit: str, **extra: object) -> None:
        self.emit(self.figure(metric, value, unit, **extra))


def quantile_nearest_rank(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank: always one of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def percentile_interpolated(values: list[float], p: float) -> float:
    """The ``p`` percentile (0..100), interpolated between the nearest two values."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


# -- command line ------------------------------------------------------------------------


def add_dsn_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"),
                        help="a superuser DSN (default: $DATABASE_URL); databases are created and "
                             "dropped")


def add_image_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image", default=os.environ.get("PG_SHELL_IMAGE", DEFAULT_IMAGE),
                        help=f"the sandbox image (default: $PG_SHELL_IMAGE, else {DEFAULT_IMAGE})")


def require_dsn(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    if not args.dsn:
        parser.error("--dsn or DATABASE_URL (a superuser DSN) is required")
    return str(args.dsn)


# -- the database ------------------------------------------------------------------------


def database_name(dsn: str) -> str:
    return str(psycopg2.extensions.parse_dsn(dsn)["dbname"])


def with_database(dsn: str, name: str) -> str:
    """The same server and credentials, another database."""
    return psycopg2.extensions.make_dsn(dsn, dbname=name)


@contextlib.contextmanager
def migrated_database(admin_dsn: str, prefix: str,
                      progress: Callable[[str], None] = lambda _: None) -> Iterator[str]:
    """A new database on the server of ``admin_dsn``, migrated from empty by
    the migration runner; its (superuser) DSN. Dropped at the end."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = connect(admin_dsn)
    try:
        query(admin, f'CREATE DATABASE "{name}"')
        try:
            dsn = with_database(admin_dsn, name)
            conn = connect(dsn)
            try:
                migrations.migrate(conn, progress=lambda message: progress(f"{name}: {message}"))
            finally:
                conn.close()
            yield dsn
        finally:
            query(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


def create_user(dsn: str, username: str, password: str, *, sessions: int | None = None,
                running: int | None = None, queued: int | None = None) -> str:
    """A tenant made as `pg-shell user` makes one (as shell_admin), with the
    quotas given (the others keep their defaults); its id."""
    admin = connect_as(dsn, "shell_admin")
    try:
        user_id = str(one(admin, "SELECT shell.create_user(%s, %s)", (username, password)))
        # NULL keeps a quota's default.
        call(admin, "SELECT * FROM shell.set_user_quota(%s, %s, %s, %s)",
             (username, sessions, running, queued))
        return user_id
    finally:
        admin.close()


def tenant_connection(dsn: str, user_id: str) -> psycopg2.extensions.connection:
    """An autocommit connection acting as the tenant, as PostgREST would."""
    return connect_as(dsn, "shell_user", {"sub": user_id, "role": "shell_user"})


# -- waiting for work ----------------------------------------------------------------------

# How long no command may finish before a wait for work gives up: a liveness
# bound (a single command ends within its time limit), never a total for the
# work, whose speed depends on how busy the machine is.
STALL_S = 300.0


class Stalled(RuntimeError):
    """No command finished for STALL_S seconds; says how many had."""


def wait_for_work(left: Callable[[], int], total: int, *, stall_s: float = STALL_S,
                  check: Callable[[], None] = lambda: None,
                  progress: Callable[[str], None] = lambda _: None,
                  every_s: float = 0.5, report_every_s: float = 15.0) -> None:
    """Until ``left()`` (the commands of ``total`` not yet finished) is 0.
    Fails only when it has not gone down for ``stall_s`` seconds; ``check()``
    raises when a worker died; ``progress`` hears "N/total done" now and then."""
    unfinished = left()
    moved = next_report = time.monotonic()
    while unfinished:
        time.sleep(every_s)
        check()
        now, before, unfinished = time.monotonic(), unfinished, left()
        if unfinished < before:
            moved = now
        elif now - moved > stall_s:
            raise Stalled(f"no command finished for {stall_s:g} s: {total - unfinished} of "
                          f"{total} done, {unfinished} unfinished")
        if now >= next_report:
            progress(f"{total - unfinished}/{total} done")
            next_report = now + report_every_s


# -- the executor and the engine ---------------------------------------------------------


@contextlib.contextmanager
def running_executor(dsn: str, image: str, name: str, work: Path, timeout: float = 120,
                     **settings: str) -> Iterator[Daemon]:
    """The executor daemon on ``dsn`` (``settings`` added to its environment),
    its log in ``work``, with volumes of its own; stopped at the end, and
    what it left on the engine removed."""
    volumes = tempfile.mkdtemp(prefix=f"bench-{name}-vol-", dir="/var/tmp")
    daemon = Daemon(executor_env(dsn, image, {
        "PG_SHELL_WORKER_ID": f"bench-{name}-{secrets.token_hex(4)}",
        "PG_SHELL_SCOPE": database_name(dsn), "PG_SHELL_VOLUMES_DIR": volumes,
        "PG_SHELL_DISK_QUOTA_MB": "64", "PG_SHELL_METRICS_PORT": "0", **settings}),
        work / "executor.log")
    try:
        yield daemon.start(timeout)
    finally:
        daemon.stop()
        remove_containers(f"pg-shell.worker-id={daemon.worker_id}")
        remove_quota_volumes(volumes)


@contextlib.contextmanager
def running_gateway(dsn: str, work: Path, **settings: str) -> Iterator[Gateway]:
    """The gateway on ``dsn`` (as the stack tests run it), its log in ``work``."""
    gateway = Gateway(dsn, work / "gateway.log")
    try:
        yield gateway.start(**settings)
    finally:
        gateway.stop()


def image_id(ref: str) -> str:
    """The id of image ``ref`` on the engine (fails if it is not there)."""
    return subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", ref],
                          capture_output=True, text=True, check=True).stdout.strip()


def remove_containers(*labels: str) -> None:
    """Every container carrying one of ``labels`` (``key=value``), running or not."""
    for label in labels:
        ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"],
                             capture_output=True, text=True, check=False).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


def remove_quota_volumes(volumes_dir: str) -> None:
    """The disk-quota volumes an executor made under ``volumes_dir`` (an ext4
    image per volume, attached to a loop device), then the directory."""
    for image in Path(volumes_dir).glob("*.ext4"):
        subprocess.run(["docker", "volume", "rm", "-f", image.stem], capture_output=True,
                       check=False)
        loops = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                               capture_output=True, text=True, check=False).stdout.split()
        for loop in loops:
            subprocess.run(["losetup", "-d", loop], capture_output=True, check=False)
    shutil.rmtree(volumes_dir, ignore_errors=True)


def peak_during(pid: int, work: Callable[[], None]) -> tuple[int, int, float]:
    """(peak RSS during ``work``, RSS before it, seconds it took)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    before = rss_bytes(pid)
    started = time.monotonic()
    work()
    return rss_bytes(pid, "VmHWM"), before, time.monotonic() - started
