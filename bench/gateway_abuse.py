"""The gateway under an anonymous attacker: how much its peak resident
memory grows while it refuses a 64 MiB POST (announced by Content-Length, and sent
chunked), and how long a half-sent request, and a body trickled a byte a
second, hold a connection. Then under tenants' files (bench.file_load): its
peak resident memory while 4 and 16 uploads of 64 MiB, and 4 and 16
downloads of 32 MiB, run at once (the target is at most 200 MB), and the
database's growth per repeated 1 MiB upload to one path.

`--code DIR` runs the gateway from another source tree, to compare with an
earlier version: `git archive REV | tar -x -C DIR` (or `git worktree add`).
`--old DIR` runs both in the same run, this tree first; the old one's file
rounds run only `--old-parallel` calls at once (default 4: sixteen 64 MiB
uploads held whole would take several GB). Needs DATABASE_URL (a superuser;
the gateway connects as shell_authenticator without a password). Prints one
JSON object per line on stdout; progress goes to stderr.

    .venv/bin/python -m bench.gateway_abuse --old /tmp/old
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench import file_load
from bench.common import REPO, Report, add_dsn_option, migrated_database, require_dsn
from tests.fixtures_stack import authenticator_dsn, free_port
from tests.gateway.raw_http import (
    closed_within,
    post_huge,
    rss_bytes,
    status_of,
    trickled_until_closed,
)

MiB = 1024 * 1024
ATTACK_BYTES = 64 * MiB
SLOW_WAIT_S = 60  # a half-sent request still open after this is reported as never dropped


def start_gateway(code: Path, dsn: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    env.update({"DATABASE_URL": dsn, "PG_SHELL_GATEWAY_DATABASE_URL": authenticator_dsn(dsn)})
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "executor.cli.main", "serve",
                                 "--port", str(port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=code)
    deadline = time.monotonic() + 60
    while "Application startup complete" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the gateway did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    return proc


def rss_growth(proc: subprocess.Popen[bytes], port: int, chunked: bool) -> tuple[int, int]:
    """(status of the answer, growth of the gateway's peak RSS, VmHWM, in bytes)."""
    httpx.get(f"http://127.0.0.1:{port}/rpc/login", timeout=30)  # warm the common path
    before = rss_bytes(proc.pid, "VmHWM")
    answer, _ = post_huge(port, "/rpc/login", ATTACK_BYTES, chunked=chunked)
    return (status_of(answer) if answer else 0), rss_bytes(proc.pid, "VmHWM") - before


def time_to_drop(port: int) -> float | None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /rpc/login HTTP/1.1\r\nHost: x\r\n")
        return closed_within(sock, SLOW_WAIT_S)


def time_to_drop_trickled_body(port: int) -> float | None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /rpc/login HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        return trickled_until_closed(sock, b" ", SLOW_WAIT_S)


def emit_drop(report: Report, metric: str, dropped: float | None, code: str) -> None:
    """None: still open after SLOW_WAIT_S."""
    report.emit({"metric": metric, "value": None if dropped is None else round(dropped, 2),
                 "unit": "s", "waited_s": SLOW_WAIT_S, "code": code})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_dsn_option(parser)
    parser.add_argument("--code", type=Path, default=REPO,
                        help="the source tree whose gateway runs (default: this one)")
    parser.add_argument("--old", type=Path, default=None,
                        help="an earlier source tree whose gateway runs after it, in the same run")
    parser.add_argument("--old-parallel", type=int, default=4,
                        help="calls at once in the old gateway's file rounds")
    parser.add_argument("--parallel", type=int, nargs="+", default=[4, 16],
                        help="calls at once in the file rounds")
    args = parser.parse_args()
    admin_dsn = require_dsn(parser, args)
    report = Report("gateway_abuse")
    run(report, admin_dsn, args.code, args.parallel)
    if args.old is not None:
        run(report, admin_dsn, args.old, [args.old_parallel])


def run(report: Report, admin_dsn: str, tree: Path, parallel: list[int]) -> None:
    code = str(tree.resolve())
    with migrated_database(admin_dsn, "bench_abuse", report.log) as dsn, \
            tempfile.TemporaryDirectory() as scratch:
        port = free_port()
        proc = start_gateway(tree, dsn, port, Path(scratch) / "gateway.log")
        try:
            for chunked in (False, True):
                how = "chunked" if chunked else "content_length"
                report.log(f"POSTing 64 MiB ({how})")
                status, grown = rss_growth(proc, port, chunked)
                report.emit_figure(f"peak_rss_growth_64mib_{how}", grown / MiB, "MiB",
                                   status=status, code=code)
            report.log("sending half a request")
            dropped = time_to_drop(port)
            emit_drop(report, "half_sent_request_dropped_after", dropped, code)
            report.log("trickling a body, a byte a second")
            emit_drop(report, "trickled_body_dropped_after", time_to_drop_trickled_body(port),
                      code)
            report.emit_figure("rss_after", rss_bytes(proc.pid) / MiB, "MiB", code=code)
            file_load.run(report, proc.pid, f"http://127.0.0.1:{port}", dsn, code, parallel)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


if __name__ == "__main__":
    main()
