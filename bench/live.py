"""What the live feed and the listings cost (DESIGN.md §12), measured on the
real gateway, executor daemon, Docker engine and PostgreSQL:

- transactions (pg_stat_database.xact_commit) while one streaming command
  runs for about 2 seconds, with no long-polls (the reference) and after 200
  long-polls on its session were opened and abandoned by their clients;
- notifications on the change channel during that command;
- one latest_output call over 24 commands of 1 MiB output each (control
  bytes and non-ASCII text): the answer's bytes and the gateway's peak RSS.

Needs DATABASE_URL (a superuser), a Docker engine and the sandbox image
(PG_SHELL_IMAGE). One JSON object per line on stdout; progress on stderr.

    .venv/bin/python -m bench.live
"""

from __future__ import annotations

import argparse
import os
import re
import select
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    Report,
    add_dsn_option,
    add_image_option,
    create_user,
    image_id,
    migrated_database,
    require_dsn,
    running_executor,
    tenant_connection,
)
from executor.db.connection import connect, query
from tests.db.api_helpers import run
from tests.fixtures_stack import Gateway

PASSWORD = "correct horse"
MIB = 1024 * 1024
STREAM = "for i in $(seq 40); do echo line $i; sleep 0.05; done"
LINE = "\x01\x02\x1b[31mé€" + "x" * 20 + "\x07\n"
REPORT = Report("live")
log, emit = REPORT.log, REPORT.emit_figure


def start_gateway(dsn: str, path: Path, **settings: str) -> Gateway:
    gateway = Gateway(dsn, path)
    try:
        return gateway.start(**settings)
    except TypeError:  # an older checkout's helper (a before/after comparison)
        return gateway.start()


def long_poll(port: int, token: str, session: str, cursor: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall((f"GET /rpc/session_changes?p_session_id={session}&p_after_change={cursor} "
                  f"HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                  "Prefer: wait=20\r\nAccept: application/json\r\n\r\n").encode())
    return sock


def xact_commits(conn: Any) -> int:
    return int(query(conn, "SELECT xact_commit FROM pg_stat_database"
                           " WHERE datname = current_database()")[0]["xact_commit"])


def streaming_command(http: httpx.Client, token: str, conn: Any, session: str,
                      polls: int, port: int) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {token}"}
    cursor = int(http.post("/rpc/session_cursor", json={"p_session_id": session},
                           headers=headers).json())
    socks = [long_poll(port, token, session, cursor) for _ in range(polls)]
    time.sleep(2 if polls else 0)
    for sock in socks:
        sock.close()
    time.sleep(1)
    listen = connect(os.environ["BENCH_LIVE_DSN"])
    listen.autocommit = True
    with listen.cursor() as cur:
        cur.execute("LISTEN shell_changes")
    before = xact_commits(conn)
    command_id = http.post("/rpc/submit_command", headers=headers,
                           json={"p_session_id": session, "p_command": STREAM}).json()
    deadline = time.monotonic() + 120
    while not query(conn, "SELECT 1 FROM shell.commands WHERE id = %s AND status = 'done'",
                    (command_id,)):
        if time.monotonic() > deadline:
            raise SystemExit(f"bench.live: command {command_id} did not finish")
        if select.select([listen], [], [], 0.05)[0]:
            listen.poll()
    spent = xact_commits(conn) - before
    listen.poll()
    notified = len(listen.notifies)
    listen.close()
    run_ms = float(query(conn, "SELECT duration_ms FROM shell.commands WHERE id = %s",
                         (command_id,))[0]["duration_ms"])
    return {"transactions": spent, "notifications": notified, "run_ms": run_ms}


def peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(match.group(1)) / 1024 if match else float("nan")


def huge_listing(dsn: str, user: str, gateway: Gateway, http: httpx.Client, token: str) -> None:
    conn = tenant_connection(dsn, user)
    with conn.cursor() as cur:
        cur.execute("SELECT shell_api.create_session('big')")
        session = cur.fetchone()[0]
        output = (LINE * (MIB // len(LINE.encode()) + 1)).encode()[:MIB].decode("utf-8", "ignore")
        for i in range(24):
            cur.execute("SELECT shell_api.submit_command(%s, %s)", (session, f"big {i}"))
            run(dsn, cur.fetchone()[0], output)
    assert gateway.proc is not None
    rss_before = peak_rss_mb(gateway.proc.pid)
    answer = http.post("/rpc/latest_output", headers={"Authorization": f"Bearer {token}"},
                       json={"p_session_id": session, "p_limit": 24}, timeout=300)
    emit("latest_output_24x1MiB_response_bytes", len(answer.content), "bytes",
         status=answer.status_code, stored_output_bytes=24 * MIB)
    emit("gateway_peak_rss_during_listing", peak_rss_mb(gateway.proc.pid), "MB",
         before=round(rss_before, 1), target_max=200)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.live",
                                     description=(__doc__ or "").split("\n\n")[0])
    add_dsn_option(parser)
    add_image_option(parser)
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args()
    admin_dsn = require_dsn(parser, args)
    image = image_id(args.image)
    work = Path(tempfile.mkdtemp(prefix="bench-live-"))
    with migrated_database(admin_dsn, "pgshell_bench_live") as dsn:
        os.environ["BENCH_LIVE_DSN"] = dsn
        user = create_user(dsn, "bench", PASSWORD)
        rootful = os.environ.get("PG_SHELL_ALLOW_ROOTFUL", "1")
        with running_executor(dsn, image, "live", work, timeout=60,
                              PG_SHELL_ALLOW_ROOTFUL=rootful) as daemon:
            gateway = start_gateway(dsn, work / "gateway.log",
                                    PG_SHELL_LONG_POLLS=str(args.polls + 50),
                                    PG_SHELL_LONG_POLLS_PER_USER=str(args.polls + 50))
            try:
                conn = connect(dsn)
                with httpx.Client(base_url=gateway.url, timeout=60) as http:
                    token = http.post("/rpc/login", json={"p_username": "bench",
                                                          "p_password": PASSWORD}).json()["token"]
                    session = http.post("/rpc/create_session", json={"p_name": "live"},
                                        headers={"Authorization": f"Bearer {token}"}).json()
                    streaming_command(http, token, conn, session, 0, gateway.port)  # warm-up
                    for polls in (0, args.polls):
                        figures = streaming_command(http, token, conn, session, polls, gateway.port)
                        log(f"{polls} abandoned long-polls: {figures}")
                        emit("transactions_per_streaming_command", figures["transactions"],
                             "transactions", abandoned_long_polls=polls, command=STREAM,
                             run_ms=figures["run_ms"])
                        emit("notifications_per_streaming_command", figures["notifications"],
                             "notifications", abandoned_long_polls=polls, run_ms=figures["run_ms"])
                    daemon.stop()  # the listing's commands are run by hand (as tests/db does)
                    huge_listing(dsn, user, gateway, http, token)
                conn.close()
            finally:
                gateway.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
