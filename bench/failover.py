"""Failover: two executors run SESSIONS x PER_SESSION commands on a primary
with a synchronous replica under Patroni (ops/ha). A third of the way in, the
primary is killed (SIGKILL, Patroni and PostgreSQL at once) and the replica
takes over; the last third of the commands is submitted from that moment on,
through the failover; later the old primary rejoins as a replica.

    .venv/bin/python -m bench.failover --sessions 200 --per-session 10

Checked (``problems``):

- every submission the database acknowledged is there, with its text;
- nothing ran twice: each command appends its own token to its session's
  log, so a token is there at most once, and exactly once for a command done;
- each command ended done with exit 0, or failed "executor lost" (it started
  before the failover and its lease ran out across it), nothing else;
- each session's log is in the order its commands were submitted;
- `pg-shell audit verify` passes.

A gateway (`pg-shell serve`) runs on the same multi-host DSN, and a client
long-polls one session's changes through it across the failover: after it,
a long-poll must be woken by a change (its LISTEN came back).

Figures: seconds from the kill to the first write accepted through the
multi-host DSN, to the first command completed after it, and to the first
change the gateway's long-poll delivered; commands/s over the whole run.
Prints one JSON object per line on stdout, progress on stderr. The cluster
is removed at the end. tests/ha runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg2
import psycopg2.extensions

from bench.common import (
    STALL_S,
    TERMINAL,
    Report,
    add_image_option,
    create_user,
    image_id,
    tenant_connection,
    wait_for_work,
    with_database,
)
from bench.many_hosts import remove_volumes
from executor.db import migrations
from executor.db.connection import connect
from tests.daemon import REPO, Daemon, executor_env
from tests.fixtures_stack import Gateway
from tests.support import call

REPORT = Report("failover")
log, figure = REPORT.log, REPORT.figure
HA = str(REPO / "ops" / "ha")
# How a command ends when it started before the failover and its executor
# could not renew the lease across it (shell.expire_leases): never re-run.
LOST = "executor lost"
PASSWORD = "failover-test-password"
WAIT_S = 10  # each long-poll's wait


class Tenant:
    """A tenant's connection that reconnects while the database fails over.
    A call that fails is tried again on a new connection; a submission tried
    again may have been accepted the first time, which is why each attempt
    carries its own token and only an acknowledged id counts as accepted."""

    def __init__(self, dsn: str, user_id: str, deadline_s: float = STALL_S) -> None:
        self._dsn, self._user_id, self._deadline_s = dsn, user_id, deadline_s
        self._conn: psycopg2.extensions.connection | None = None

    def call(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        return self.until_answered(lambda: (sql, params))

    def until_answered(self, statement: Callable[[], tuple[str, Any]]) -> list[dict[str, Any]]:
        """Runs ``statement()`` (made anew for each attempt) until an attempt is answered."""
        give_up = time.monotonic() + self._deadline_s
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = tenant_connection(self._dsn, self._user_id)
                return call(self._conn, *statement())
            except (psycopg2.OperationalError, psycopg2.InterfaceError,
                    psycopg2.errors.ReadOnlySqlTransaction):
                self.close()
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class Submissions:
    """What was submitted: token -> command id, for those acknowledged."""

    accepted: dict[str, int] = field(default_factory=dict)
    first_after_kill_s: float | None = None  # kill -> first acknowledged submit

    def submit(self, tenant: Tenant, session_id: str, name: str) -> None:
        """Submits ``echo TOKEN >> order.log``, each attempt with a token of its
        own: an attempt whose answer was lost may still have been accepted."""
        tokens: list[str] = []

        def attempt() -> tuple[str, Any]:
            tokens.append(f"{name}-{secrets.token_hex(3)}")
            return ("SELECT shell_api.submit_command(%s, %s) AS id",
                    (session_id, f"echo {tokens[-1]} >> order.log && echo {tokens[-1]}"))

        [row] = tenant.until_answered(attempt)
        self.accepted[tokens[-1]] = int(row["id"])


@dataclass
class FailoverResult:
    sessions: int
    per_session: int
    rows: list[dict[str, Any]]  # every command of the run, by session then id
    files: dict[str, list[str]]  # session id -> its order.log's lines
    submissions: Submissions
    first_done_after_kill_s: float | None
    feed_after_kill_s: float | None  # kill -> the gateway's long-poll brings a change
    killed: str  # the node killed (and rejoined)
    elapsed_s: float
    verify_exit: int
    verify_report: dict[str, Any]

    def figures(self) -> list[dict[str, Any]]:
        common = {"sessions": self.sessions, "per_session": self.per_session}
        return [
            figure("kill_to_first_write", self.submissions.first_after_kill_s or -1, "s",
                   **common),
            figure("kill_to_first_completion", self.first_done_after_kill_s or -1, "s",
                   **common),
            figure("kill_to_live_feed", self.feed_after_kill_s or -1, "s", **common),
            figure("throughput", len(self.rows) / self.elapsed_s, "commands/s",
                   commands=len(self.rows), lost=sum(r["reason"] == LOST for r in self.rows),
                   **common),
        ]


def ha(*args: str) -> str:
    done = subprocess.run([HA, *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"ops/ha {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


@contextlib.contextmanager
def ha_cluster() -> Iterator[tuple[str, str]]:
    """A new cluster (`ops/ha start`): its DSN and its directory, one of its
    own under /tmp (the postgres user must reach it). Stopped and removed at
    the end."""
    directory = tempfile.mkdtemp(prefix="pg_shell-ha.")
    try:
        yield ha("start", directory).splitlines()[-1], directory
    finally:
        subprocess.run([HA, "stop", directory], capture_output=True, timeout=600, check=False)
        shutil.rmtree(directory, ignore_errors=True)


def migrated(cluster_dsn: str, name: str) -> str:
    admin = connect(cluster_dsn)
    try:
        call(admin, f'CREATE DATABASE "{name}"')
    finally:
        admin.close()
    dsn = with_database(cluster_dsn, name)
    conn = connect(dsn)
    try:
        migrations.migrate(conn)
    finally:
        conn.close()
    return dsn


def run_failover(cluster_dsn: str, cluster_dir: str, image: str, *, sessions: int,
                 per_session: int, concurrency: int, work_dir: Path,
                 scope: str) -> FailoverResult:
    """Runs the load on the cluster ``ops/ha start`` made in ``cluster_dir``."""
    dsn = migrated(cluster_dsn, f"pgshell_failover_{secrets.token_hex(4)}")
    total = sessions * per_session
    username = f"failover-{secrets.token_hex(3)}"
    user_id = create_user(dsn, username, PASSWORD, sessions=sessions, running=2 * concurrency,
                          queued=total * 2)
    tenant = Tenant(dsn, user_id)
    session_ids = [str(tenant.call("SELECT shell_api.create_session(%s) AS id",
                                   (f"failover-{i}",))[0]["id"]) for i in range(sessions)]
    base_env = executor_env(dsn, image, {
        "PG_SHELL_SCOPE": scope, "PG_SHELL_CONCURRENCY": str(concurrency),
        "PG_SHELL_DISK_QUOTA": "none", "PG_SHELL_METRICS_PORT": "0",
        "PG_SHELL_TIMEOUT_S": "60", "PG_SHELL_POLL_INTERVAL_S": "0.5",
        "PG_SHELL_VOLUMES_DIR": str(work_dir / "volumes"),
        # Every session keeps its copy on the host: this is about the database,
        # and evicting copies of 200 sessions of one user would only slow it.
        "PG_SHELL_VOLUMES_PER_USER": "0",
    })
    procs = [Daemon({**base_env, "PG_SHELL_WORKER_ID": f"{scope}-host{k}",
                     "PG_SHELL_SIGNING_KEY_FILE": str(work_dir / f"host{k}.key"),
                     "PG_SHELL_SECRETS_KEY_FILE": str(work_dir / "secrets.key")},
                    work_dir / f"host{k}.log").launch() for k in range(2)]
    submissions = Submissions()
    first_rounds = per_session * 2 // 3
    gateway = Gateway(dsn, work_dir / "gateway.log")
    # The session whose late commands are submitted last: its changes come latest.
    feed = LiveFeed(gateway, username, session_ids[-1])

    def token(session: int, round_: int) -> str:
        return f"s{session}-r{round_}"

    def unfinished() -> int:
        return int(tenant.call("SELECT count(*) AS n FROM shell.commands WHERE status <> ALL(%s)",
                               (list(TERMINAL),))[0]["n"])

    def died() -> None:
        for proc in procs:
            if proc.exited():
                raise RuntimeError(f"an executor died:\n{proc.log()[-3000:]}")

    try:
        for proc in procs:
            proc.wait_for_log(" ready: ", timeout=120)
        gateway.start()
        started = time.monotonic()
        for round_ in range(first_rounds):
            for i, sid in enumerate(session_ids):
                submissions.submit(tenant, sid, token(i, round_))
        log(f"submitted {len(submissions.accepted)}; the primary dies at {total // 3} done")
        wait_until(lambda: len(submissions.accepted) - unfinished() >= total // 3, died)
        killed = ha("primary", cluster_dir)
        ha("kill", cluster_dir, killed)
        killed_at = time.monotonic()
        log(f"killed {killed}; submitting the rest through the failover")
        watcher = threading.Thread(target=feed.follow, args=(killed_at,), name="live-feed")
        watcher.start()
        late = Tenant(dsn, user_id)

        def submit_rest() -> None:
            for round_ in range(first_rounds, per_session):
                for i, sid in enumerate(session_ids):
                    submissions.submit(late, sid, token(i, round_))
                    if submissions.first_after_kill_s is None:
                        submissions.first_after_kill_s = time.monotonic() - killed_at

        submitter = threading.Thread(target=submit_rest, name="late-submits")
        submitter.start()
        done_at_kill = done_count(tenant)
        wait_until(lambda: done_count(tenant) > done_at_kill, died)
        first_done_s = time.monotonic() - killed_at
        log(f"first completion {first_done_s:.1f} s after the kill")
        submitter.join(STALL_S)  # a liveness bound: problems() counts what was accepted
        watcher.join(STALL_S)  # a liveness bound: problems() says if it brought nothing
        log(f"rejoining {killed} as a replica")
        ha("rejoin", cluster_dir, killed)
        wait_for_work(unfinished, total, check=died, progress=log)
        elapsed = time.monotonic() - started
    finally:
        feed.stop.set()
        gateway.stop()
        for proc in procs:
            proc.stop()
        remove_volumes(session_ids, scope)
    rows = tenant.call("""
        SELECT id, session_id::text, command, status, exit_code, reason, attempts, worker_id,
               shell.output_of(c) AS output
        FROM shell.commands c ORDER BY session_id, id""")
    files = {sid: read_log(tenant, sid) for sid in session_ids}
    tenant.close()
    verify = subprocess.run([sys.executable, "-m", "executor.cli.main", "audit", "verify",
                             "--json"], env={**os.environ, "DATABASE_URL": dsn}, cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    report = json.loads(verify.stdout) if verify.stdout.strip() else {"stderr": verify.stderr}
    return FailoverResult(sessions, per_session, rows, files, submissions, first_done_s,
                          feed.after_kill_s, killed, elapsed, verify.returncode, report)


class LiveFeed:
    """A client of the gateway long-polling one session's changes, as the
    page does, from the kill until a poll is woken by a change: a poll that
    ends before its wait with a change made after its cursor was read
    (the gateway reads before it waits, so a poll that found a change at
    once, or at the end of its wait, proves nothing of its LISTEN)."""

    def __init__(self, gateway: Gateway, username: str, session_id: str) -> None:
        self._gateway, self._username, self._session_id = gateway, username, session_id
        self.after_kill_s: float | None = None
        self.stop = threading.Event()

    def follow(self, killed_at: float) -> None:
        with httpx.Client(base_url=self._gateway.url, timeout=60) as http:
            token = self._retried(lambda: http.post(
                "/rpc/login", json={"p_username": self._username, "p_password": PASSWORD}))
            headers = {"Authorization": f"Bearer {token.json()['token']}"}
            while not self.stop.is_set():
                cursor = self._retried(lambda: http.post(
                    "/rpc/session_cursor", json={"p_session_id": self._session_id},
                    headers=headers)).json()
                asked = time.monotonic()
                answer = self._retried(lambda after=cursor: http.get(
                    "/rpc/session_changes",
                    params={"p_session_id": self._session_id, "p_after_change": after},
                    headers={**headers, "Prefer": f"wait={WAIT_S}"}))
                if answer.json() and time.monotonic() - asked < WAIT_S - 1:
                    self.after_kill_s = time.monotonic() - killed_at
                    return

    def _retried(self, request: Callable[[], httpx.Response]) -> httpx.Response:
        """The answer once the gateway gives one (a 503 or a lost connection
        while the database fails over is tried again)."""
        while not self.stop.is_set():
            try:
                answer = request()
                if answer.status_code == 200:
                    return answer
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError("stopped before the gateway answered")


def done_count(tenant: Tenant) -> int:
    return int(tenant.call("SELECT count(*) AS n FROM shell.commands WHERE status = 'done'")
               [0]["n"])


def wait_until(condition: Callable[[], bool], check: Callable[[], None],
               stall_s: float = STALL_S) -> None:
    """A liveness bound: fails only when ``condition`` stays false STALL_S."""
    give_up = time.monotonic() + stall_s
    while not condition():
        check()
        if time.monotonic() > give_up:
            raise RuntimeError(f"still waiting after {stall_s:g} s")
        time.sleep(0.2)


def read_log(tenant: Tenant, session_id: str) -> list[str]:
    rows = tenant.call("SELECT shell_api.read_file(%s, 'order.log') AS content", (session_id,))
    return bytes(rows[0]["content"] or b"").decode().splitlines()


def problems(result: FailoverResult) -> list[str]:
    found = []
    expected = result.sessions * result.per_session
    if len(result.submissions.accepted) != expected:
        found.append(f"{len(result.submissions.accepted)} submissions accepted, not {expected}")
    by_id = {r["id"]: r for r in result.rows}
    for tok, command_id in result.submissions.accepted.items():
        row = by_id.get(command_id)
        if row is None or tok not in row["command"]:
            found.append(f"accepted submission {tok} (command {command_id}) is lost")
    odd = [(r["id"], r["status"], r["exit_code"], r["reason"]) for r in result.rows
           if (r["status"], r["exit_code"]) != ("done", 0)
           and (r["status"], r["reason"]) != ("failed", LOST)]
    if odd:
        found.append(f"{len(odd)} commands neither done nor lost with their executor: {odd[:5]}")
    by_session: dict[str, list[dict[str, Any]]] = {}
    for row in result.rows:
        by_session.setdefault(row["session_id"], []).append(row)
    for sid, rows in by_session.items():
        lines = result.files.get(sid, [])
        tokens = [r["command"].split()[1] for r in rows]
        for row, tok in zip(rows, tokens, strict=True):
            times = lines.count(tok)
            if times > 1 or (row["status"] == "done" and times != 1):
                found.append(f"session {sid}: command {row['id']} ({row['status']}) "
                             f"wrote its line {times} times")
            if row["status"] == "done" and row["output"] != f"{tok}\n":
                found.append(f"session {sid}: command {row['id']} printed {row['output']!r}")
        if [t for t in tokens if t in lines] != lines:
            found.append(f"session {sid}: log out of order or foreign: {lines}")
    if result.feed_after_kill_s is None:
        found.append("the gateway's long-poll brought no change after the failover")
    if result.verify_exit != 0:
        found.append(f"audit verify exited {result.verify_exit}: "
                     f"{json.dumps(result.verify_report)[:2000]}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_image_option(parser)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=3,
                        help="PG_SHELL_CONCURRENCY of each of the two executors")
    args = parser.parse_args()
    image = image_id(args.image)
    with (tempfile.TemporaryDirectory(prefix="pg-shell-failover-") as tmp,
          ha_cluster() as (cluster_dsn, cluster_dir)):
        result = run_failover(cluster_dsn, cluster_dir, image, sessions=args.sessions,
                              per_session=args.per_session, concurrency=args.concurrency,
                              work_dir=Path(tmp), scope=f"bench-failover-{secrets.token_hex(4)}")
    wrong = problems(result)
    for problem in wrong[:20]:
        log(f"PROBLEM: {problem}")
    for line in result.figures():
        REPORT.emit({**line, "correct": not wrong})
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
