"""Keystroke -> echo on a terminal command (DESIGN.md §13), measured in one
run on the real gateway, executor daemon, Docker engine and PostgreSQL:

* gateway: the page's HTTP calls without the browser: POST
  /rpc/send_input, then the echo from the live feed's long-poll (GET
  /rpc/session_changes_html, p_tail, `Prefer: wait=20`): the raw output
  its fragment carries, read_output only for what it does not;
* page: a key pressed in the page's terminal view in headless Chromium,
  until the frame that draws its echo was painted (when the page has that
  view); the start of the frame after it (when a 60 Hz screen shows it at
  the latest) is reported beside it as next_frame;
* cli: `pg-shell run -t` on a pseudo-terminal (when the CLI has -t);
* docker_attach, the reference: a container with a TTY made with the
  executor's own hardening and image, a byte written to its attach socket.

Every path runs `cat` on a terminal; keys are letters, one at a time, a
pause (--gap-ms) after each echo, the paths taking turns in blocks of
--block keys so a busy machine weighs on each alike. Each path's line
gives p50/p99 (nearest rank) over --keys keys, after --warmup unmeasured
ones, and the CPU time per key of the executor (its process), the
database (the backends of the bench's database, by whom they serve: the
executor or the gateway), the gateway and, with the page, Chromium over
that path's blocks, raw and less what they spend idle (measured first, every
program running, nobody typing). The Docker engine's share is left out:
the engine serves any other work on the machine too, so its time cannot be
told apart. For pg_shell's paths, `server_*`: from a key's input row
inserted to the output chunk holding its echo inserted (the database's
clock). The summary line: ratios to docker attach and the target (p50 <=
30 ms, p99 <= 100 ms), reported, not asserted.

    .venv/bin/python -m bench.interactive --keys 200

Needs DATABASE_URL (a superuser), a Docker engine and the sandbox image
(PG_SHELL_IMAGE); the page path Debian's chromium and the test extras. One
JSON object per line on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cli import cli_env, rpc
from bench.common import (
    TERMINAL,
    Report,
    add_dsn_option,
    add_image_option,
    create_user,
    database_name,
    image_id,
    migrated_database,
    require_dsn,
    running_executor,
    running_gateway,
    wait_for_work,
)
from bench.common import quantile_nearest_rank as quantile
from bench.cpu_time import CpuMeter, DatabaseCpu, browser_cpu_s, process_cpu_s
from bench.echo_page import NotMeasured, PagePath
from bench.echo_paths import (
    DEFAULT_PROGRAM,
    CliPath,
    DockerAttachPath,
    EchoPath,
    GatewayPath,
    cli_has_tty,
)
from executor.config import SHELL_ROOT
from executor.db.connection import Connection, connect, query
from tests.daemon import Daemon
from tests.fixtures_stack import Gateway

PATHS = ("gateway", "page", "cli", "docker_attach")
REFERENCE = "docker_attach"
TARGET_P50_MS, TARGET_P99_MS = 30, 100
KEYS = string.ascii_lowercase
PASSWORD = "correct horse"
USER = "bench"
REPORT = Report("interactive")
log, emit = REPORT.log, REPORT.emit


@dataclass
class Measured:
    """One path's keys: their latencies (s), and the CPU (s) of each
    process over its blocks, beside the blocks' wall time."""

    path: EchoPath
    latencies: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0


def type_block(measured: Measured, count: int, gap_s: float, meter: CpuMeter) -> None:
    before, started = meter.read(), time.monotonic()
    for _ in range(count):
        # A typist's pause: what follows the last echo (delivery reports,
        # the next long-poll) is done before the next key, as it would be.
        time.sleep(gap_s)
        key = KEYS[len(measured.latencies) % len(KEYS)]
        measured.latencies.append(measured.path.press(key))
    after = meter.read()
    measured.wall_s += time.monotonic() - started
    for name, value in after.items():
        measured.cpu[name] = measured.cpu.get(name, 0.0) + value - before[name]


def warm_up(path: EchoPath, keys: int, gap_s: float) -> None:
    """Unmeasured keys: the first also waits for the program to start."""
    for i in range(keys):
        time.sleep(gap_s)
        path.press(KEYS[-1 - i % len(KEYS)])


def idle_rates(meter: CpuMeter, seconds: float) -> dict[str, float]:
    """CPU seconds per second of each process with every command running
    and nobody typing (heartbeats, the input feed's look for input)."""
    before = meter.read()
    time.sleep(seconds)
    after = meter.read()
    return {name: (after[name] - before[name]) / seconds for name in after}


def server_side_ms(conn: Connection, session_id: str, skip: int) -> list[float]:
    """Per key, from its input row's insert to the insert of the first
    output chunk after it (keys go one at a time: that chunk holds its
    echo), on the database's clock; the first ``skip`` (warm-up) left out."""
    rows = query(conn, """
        SELECT extract(epoch FROM (SELECT min(o.created_at) FROM shell.output_chunks o
                                   WHERE o.command_id = i.command_id
                                     AND o.created_at >= i.created_at) - i.created_at) * 1000
               AS ms
        FROM shell.command_input i
        WHERE i.command_id = (SELECT max(c.id) FROM shell.commands c WHERE c.session_id = %s)
          AND i.kind = 'data' AND i.length = 1  -- one key (a redacted one has no data)
        ORDER BY i.seq""", (session_id,))
    return [float(r["ms"]) for r in rows[skip:] if r["ms"] is not None]


def stage_medians(stages: list[dict[str, float | None] | None]) -> dict[str, Any]:
    """Per stage of the page's keys (ms after the keydown), its median over
    the keys where the page's resource timings showed it."""
    found: dict[str, list[float]] = {}
    for stage in stages:
        for name, ms in (stage or {}).items():
            if ms is not None:
                found.setdefault(name, []).append(ms)
    return {name: round(quantile(values, 0.5), 2) for name, values in found.items()}


def figures(values_ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(quantile(values_ms, 0.5), 2),
            "p99_ms": round(quantile(values_ms, 0.99), 2)}


def report_path(name: str, measured: Measured, idle: dict[str, float],
                extra: dict[str, Any]) -> dict[str, float]:
    ms = [s * 1000 for s in measured.latencies]
    n = len(ms)
    per_key = {k: round(v * 1000 / n, 3) for k, v in measured.cpu.items()}
    net = {k: round((v - idle[k] * measured.wall_s) * 1000 / n, 3)
           for k, v in measured.cpu.items()}
    found = figures(ms)
    emit({"metric": "keystroke_to_echo", "path": name, "n": n, **found,
          "mean_ms": round(statistics.fmean(ms), 2), "max_ms": round(max(ms), 2), "unit": "ms",
          "cpu_ms_per_key": per_key, "cpu_ms_per_key_less_idle": net,
          **extra})
    return found


def report_summary(found: dict[str, dict[str, float]], skipped: dict[str, str]) -> None:
    reference = found.get(REFERENCE)
    ratios = {name: {q: round(f[q] / reference[q], 2) for q in ("p50_ms", "p99_ms")}
              for name, f in found.items() if reference and name != REFERENCE}
    emit({"metric": "summary", "reference": REFERENCE, "over_reference": ratios,
          "target_p50_ms": TARGET_P50_MS, "target_p99_ms": TARGET_P99_MS,
          "within_target": {name: f["p50_ms"] <= TARGET_P50_MS and f["p99_ms"] <= TARGET_P99_MS
                            for name, f in found.items() if name != REFERENCE},
          "not_measured": skipped})


# -- the stack ---------------------------------------------------------------------------


@dataclass
class Stack:
    dsn: str
    url: str
    token: str
    daemon: Daemon
    gateway: Gateway
    admin: Connection


@contextlib.contextmanager
def stack(admin_dsn: str, image: str) -> Iterator[Stack]:
    """A migrated database of its own, the executor daemon, the gateway,
    and a user signed in over HTTP."""
    work = Path(tempfile.mkdtemp(prefix="bench-interactive-"))
    with migrated_database(admin_dsn, "pgshell_bench_interactive") as dsn:
        create_user(dsn, USER, PASSWORD, sessions=10, running=4, queued=100)
        with running_executor(dsn, image, "interactive", work) as daemon, \
                running_gateway(dsn, work) as gateway:
            log(f"database {database_name(dsn)}, gateway {gateway.url}, logs in {work}")
            token = str(rpc(gateway.url, "login",
                            {"p_username": USER, "p_password": PASSWORD})["token"])
            admin = connect(dsn)
            admin.autocommit = True
            try:
                yield Stack(dsn, gateway.url, token, daemon, gateway, admin)
            finally:
                admin.close()


def open_paths(s: Stack, args: argparse.Namespace, image: str, browser: Any,
               paths: dict[str, EchoPath], skipped: dict[str, str]) -> None:
    """Into ``paths`` (so that what was opened is closed if a later one
    fails), the paths asked for; into ``skipped``, why one cannot be."""
    program, pg_shell = args.program, args.pg_shell

    def session(name: str) -> str:
        return str(rpc(s.url, "create_session", {"p_name": name}, s.token))

    for name in args.paths:
        if name == "gateway":
            paths[name] = GatewayPath(s.url, s.token, session(name), program)
        elif name == "cli":
            env = cli_env(s.url, s.token)
            if not cli_has_tty(pg_shell, env):
                skipped[name] = "`pg-shell run --help` offers no -t: the CLI has no terminal mode"
                continue
            paths[name] = CliPath(pg_shell, env, session(name), program)
        elif name == "page":
            if browser is None:
                skipped[name] = "Debian's chromium or Playwright is not installed"
                continue
            try:
                paths[name] = PagePath(browser, s.url, USER, program)
            except NotMeasured as exc:
                skipped[name] = str(exc)
        elif name == REFERENCE:
            paths[name] = DockerAttachPath(image, SHELL_ROOT, program)


def session_of(path: EchoPath) -> str | None:
    return getattr(path, "session_id", None)


def finish(s: Stack, paths: dict[str, EchoPath]) -> None:
    """Ends every program, then waits (a liveness bound) for pg_shell's
    commands to complete."""
    failed: list[BaseException] = []
    for name, path in paths.items():
        try:
            path.close()
        except Exception as exc:  # the others are still closed
            log(f"{name}: closing failed: {exc}")
            failed.append(exc)
    sessions = [sid for path in paths.values() if (sid := session_of(path))]

    def left() -> int:
        return int(query(s.admin, "SELECT count(*) AS n FROM shell.commands WHERE "
                                  "session_id = ANY(%s::uuid[]) AND status <> ALL(%s)",
                         (sessions, list(TERMINAL)))[0]["n"])

    wait_for_work(left, len(sessions), stall_s=120, progress=log)
    if failed:
        raise failed[0]


def database_client(application_name: str) -> str:
    """Whom a backend serves: the gateway's connections name themselves
    so (executor/db/gateway.py); the rest on the bench's database are the
    executor's."""
    gateway = application_name.startswith("pg-shell-gateway")
    return "database_for_gateway" if gateway else "database_for_executor"


def meter_for(s: Stack, db: DatabaseCpu, with_browser: bool) -> CpuMeter:
    """The clocks read around each block: the executor, the database's
    backends by whom they serve, the gateway, and Chromium when the page
    is measured."""
    assert s.gateway.proc is not None
    gateway_pid = s.gateway.proc.pid
    names = ["executor", "database_for_executor", "database_for_gateway", "gateway"]
    sources = [lambda: {"executor": s.daemon.cpu_s(),
                        "gateway": process_cpu_s(gateway_pid, children=True)}, db.totals]
    if with_browser:
        names.append("browser")
        sources.append(lambda: {"browser": browser_cpu_s()})
    return CpuMeter(names, *sources)


def type_in_turns(runs: dict[str, Measured], args: argparse.Namespace, meter: CpuMeter) -> None:
    """Each path types --block keys in turn until each typed --keys."""
    while any(len(m.latencies) < args.keys for m in runs.values()):
        for m in runs.values():
            count = min(args.block, args.keys - len(m.latencies))
            if count:
                type_block(m, count, args.gap_ms / 1000, meter)
        log(", ".join(f"{name} {len(m.latencies)}/{args.keys} p50 "
                      f"{quantile(m.latencies, 0.5) * 1000:.1f} ms" for name, m in runs.items()))


def details(s: Stack, m: Measured, args: argparse.Namespace) -> dict[str, Any]:
    """What a path's line says beside its latencies."""
    extra: dict[str, Any] = {"program": args.program}
    if (sid := session_of(m.path)) is not None:
        server = server_side_ms(s.admin, sid, args.warmup)
        if server:
            extra.update({f"server_{k}": v for k, v in figures(server).items()},
                         server_n=len(server))
    if isinstance(m.path, GatewayPath):
        extra["send_input_p50_ms"] = round(quantile(m.path.send_s, 0.5) * 1000, 2)
    if isinstance(m.path, PagePath):
        stages = m.path.stages[-len(m.latencies):]
        extra["stages_p50_ms"] = stage_medians(stages)
        next_frame = [s["next_frame"] for s in stages if s and s.get("next_frame") is not None]
        if next_frame:
            extra.update({f"next_frame_{k}": v for k, v in figures(next_frame).items()})
    return extra


def measure(s: Stack, args: argparse.Namespace, image: str, browser: Any) -> None:
    skipped: dict[str, str] = {}
    paths: dict[str, EchoPath] = {}
    try:
        open_paths(s, args, image, browser, paths, skipped)
        for name, reason in skipped.items():
            log(f"{name}: not measured: {reason}")
            emit({"metric": "keystroke_to_echo", "path": name, "n": 0, "measured": False,
                  "reason": reason})
        for name, path in paths.items():
            log(f"{name}: {args.warmup} warm-up keys")
            warm_up(path, args.warmup, args.gap_ms / 1000)
        db = DatabaseCpu(s.dsn, database_client)
        meter = meter_for(s, db, "page" in paths)
        idle = idle_rates(meter, args.idle_s)
        emit({"metric": "idle_cpu", "unit": "ms/s", "seconds": args.idle_s,
              "programs_running": len(paths),
              "cpu_ms_per_s": {k: round(v * 1000, 2) for k, v in idle.items()},
              "note": "every program running, nobody typing"})
        runs = {name: Measured(path) for name, path in paths.items()}
        type_in_turns(runs, args, meter)
        found = {name: report_path(name, m, idle, details(s, m, args))
                 for name, m in runs.items()}
        report_summary(found, skipped)
        log(f"database backends that ended while measured (their last CPU lost): {db.ended}")
        db.close()
    finally:
        finish(s, paths)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.interactive",
                                     description=(__doc__ or "").split("\n\n")[0])
    add_dsn_option(parser)
    add_image_option(parser)
    parser.add_argument("--keys", type=int, default=200,
                        help="keys measured per path (default 200; at most 4000 with --warmup: "
                             "they make one line, and a cooked terminal's holds 4095 characters)")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured keys first (default 5)")
    parser.add_argument("--block", type=int, default=20,
                        help="keys a path types before the next path's turn (default 20)")
    parser.add_argument("--gap-ms", type=float, default=100,
                        help="pause after each echo before the next key (default 100)")
    parser.add_argument("--idle-s", type=float, default=5,
                        help="seconds of idle CPU measured before the keys (default 5)")
    parser.add_argument("--program", default=DEFAULT_PROGRAM,
                        help=f"what runs on every terminal (default {DEFAULT_PROGRAM!r}; e.g. "
                             "'python3 -q': readline turns echo off, so pg_shell stores what is "
                             "typed redacted)")
    parser.add_argument("--paths", type=lambda v: v.split(","), default=list(PATHS),
                        help=f"comma-separated, of {','.join(PATHS)} (default: all)")
    parser.add_argument("--pg-shell", default=str(Path(sys.executable).parent / "pg-shell"),
                        help="the CLI's entry point (default: beside this Python)")
    args = parser.parse_args()
    admin_dsn = require_dsn(parser, args)
    if not 1 <= args.keys <= 4000 or args.warmup + args.keys > 4000:
        parser.error("--keys (plus --warmup) must be 1..4000")
    if unknown := set(args.paths) - set(PATHS):
        parser.error(f"unknown paths: {', '.join(sorted(unknown))}")
    image = image_id(args.image)
    with stack(admin_dsn, image) as s, browser_if("page" in args.paths) as browser:
        measure(s, args, image, browser)
    return 0


@contextlib.contextmanager
def browser_if(wanted: bool) -> Iterator[Any]:
    """Chromium driven by Playwright, or None when not wanted or not there."""
    from tests.browser.stack import chromium_path, launch_chromium, playwright_available

    if not wanted or chromium_path() is None or not playwright_available():
        yield None
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            yield browser
        finally:
            browser.close()


if __name__ == "__main__":
    sys.exit(main())
