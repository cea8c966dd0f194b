"""Many hosts: several executor processes (distinct PG_SHELL_WORKER_ID, one
PG_SHELL_SCOPE) sharing one database and one engine, against a single
executor, in the same run and with the same work:

    SESSIONS sessions x PER_SESSION commands, each `echo I >> order.log && echo I`,
    all submitted up front (interleaved across sessions);

then checked: per-session order (outputs, the file, completion times),
nothing lost, nothing run twice (attempts = 1, 10 lines per file), which
executor ran what. Figures: commands/s over the whole run, p50/p99 of
submit -> done (the database's clock; it includes queueing, since all work
is submitted at once) and of started -> done.

    .venv/bin/python -m bench.many_hosts --executors 2 --sessions 1000 --per-session 10

Each configuration gets its own database (dropped at the end). Prints one
JSON object per line on stdout; progress goes to stderr. tests/load uses
run_load() from here.
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    STALL_S,
    TERMINAL,
    Report,
    add_dsn_option,
    add_image_option,
    create_user,
    image_id,
    migrated_database,
    remove_containers,
    require_dsn,
    tenant_connection,
    wait_for_work,
)
from bench.common import percentile_interpolated as pct
from tests.daemon import Daemon, executor_env
from tests.support import call

REPORT = Report("many_hosts")
log, figure = REPORT.log, REPORT.figure


@dataclass
class LoadResult:
    executors: int
    sessions: int
    per_session: int
    rows: list[dict[str, Any]]  # every command, ordered by session then id
    files: dict[str, list[str]]  # session id -> lines of its order.log
    elapsed_s: float  # first submit -> last completion (database clock)
    per_worker: dict[str, int] = field(default_factory=dict)

    def figures(self, **extra: object) -> list[dict[str, Any]]:
        total = len(self.rows)
        latency = [r["latency_ms"] for r in self.rows]
        run = [r["run_ms"] for r in self.rows if r["run_ms"] is not None]
        common = {"executors": self.executors, "sessions": self.sessions,
                  "per_session": self.per_session, **extra}
        return [
            figure("throughput", total / self.elapsed_s, "commands/s", commands=total, **common),
            figure("submit_to_done_p50", pct(latency, 50), "ms", **common),
            figure("submit_to_done_p99", pct(latency, 99), "ms", **common),
            figure("started_to_done_p50", pct(run, 50), "ms", **common),
            figure("started_to_done_p99", pct(run, 99), "ms", **common),
            figure("commands_per_executor", min(self.per_worker.values()), "commands", stat="min",
                   per_worker=sorted(self.per_worker.values()), **common),
        ]


def run_load(dsn: str, image: str, *, executors: int, sessions: int, per_session: int,
             concurrency: int, work_dir: Path, scope: str, stall_s: float = STALL_S,
             extra_env: dict[str, str] | None = None) -> LoadResult:
    """Runs the load on the migrated database ``dsn`` (a superuser DSN) with
    ``executors`` executor processes; cleans up its containers and volumes."""
    total = sessions * per_session
    user_id = create_user(dsn, f"load-{secrets.token_hex(3)}", "load-test-password",
                          sessions=sessions, running=executors * concurrency, queued=total)
    tenant = tenant_connection(dsn, user_id)
    session_ids = [str(call(tenant, "SELECT shell_api.create_session(%s) AS id",
                            (f"load-{i}",))[0]["id"])
                   for i in range(sessions)]

    base_env = executor_env(dsn, image, {
        "PG_SHELL_SCOPE": scope, "PG_SHELL_CONCURRENCY": str(concurrency),
        # Plain volumes: hundreds of loop devices would be a host-wide cost
        # that has nothing to do with claiming.
        "PG_SHELL_DISK_QUOTA": "none", "PG_SHELL_METRICS_PORT": "0",
        "PG_SHELL_TIMEOUT_S": "60", "PG_SHELL_POLL_INTERVAL_S": "0.5",
        **(extra_env or {}),
    })
    procs = []
    for k in range(executors):
        worker_id = f"{scope}-host{k}"
        # One engine, so one volumes directory: the index of a session's copy
        # and the marks that keep it from being evicted in use live there,
        # and every executor using the engine's volumes must see them.
        env = {**base_env, "PG_SHELL_WORKER_ID": worker_id,
               "PG_SHELL_SIGNING_KEY_FILE": str(work_dir / f"{worker_id}.key"),
               "PG_SHELL_VOLUMES_DIR": str(work_dir / f"{scope}-volumes")}
        procs.append(Daemon(env, work_dir / f"{worker_id}.log").launch())
    try:
        for proc in procs:
            proc.wait_for_log(" ready: ", timeout=120)
        log(f"{executors} executor(s) ready; submitting {sessions} x {per_session}")
        submitted = [int(call(tenant, "SELECT shell_api.submit_command(%s, %s) AS id",
                              (sid, f"echo {i} >> order.log && echo {i}"))[0]["id"])
                     for i in range(per_session) for sid in session_ids]

        def died() -> None:
            for proc in procs:
                if proc.exited():
                    raise RuntimeError(f"an executor died:\n{proc.log()[-3000:]}")

        wait_for_work(lambda: int(call(tenant, "SELECT count(*) AS n FROM shell.commands "
                                               "WHERE id = ANY(%s) AND status <> ALL(%s)",
                                       (submitted, list(TERMINAL)))[0]["n"]),
                      total, stall_s=stall_s, check=died, progress=log)
    finally:
        for proc in procs:
            proc.stop()
    rows = call(tenant, """
        SELECT id, session_id::text, status, exit_code, reason, shell.output_of(c) AS output,
               attempts, worker_id, submitted_at, started_at, completed_at,
               extract(epoch FROM completed_at - submitted_at) * 1000 AS latency_ms,
               extract(epoch FROM completed_at - started_at) * 1000 AS run_ms
        FROM shell.commands c WHERE id = ANY(%s) ORDER BY session_id, id""", (submitted,))
    span = call(tenant, "SELECT extract(epoch FROM max(completed_at) - min(submitted_at)) AS s "
                        "FROM shell.commands WHERE id = ANY(%s)", (submitted,))[0]["s"]
    files = {sid: read_order_log(tenant, sid) for sid in session_ids}
    tenant.close()
    for row in rows:
        row["latency_ms"] = float(row["latency_ms"])
        row["run_ms"] = float(row["run_ms"]) if row["run_ms"] is not None else None
    remove_volumes(session_ids, scope)
    per_worker: dict[str, int] = {proc.worker_id: 0 for proc in procs}
    for row in rows:
        if row["worker_id"] in per_worker:
            per_worker[row["worker_id"]] += 1
    return LoadResult(executors, sessions, per_session, rows, files, float(span), per_worker)


def read_order_log(tenant: Any, session_id: str) -> list[str]:
    """A session's order.log as its files hold it in the database (a host's
    volume is only a cache of them, and may already be gone)."""
    content = call(tenant, "SELECT shell_api.read_file(%s, 'order.log') AS content",
                   (session_id,))[0]["content"]
    return bytes(content).decode().splitlines()


def remove_volumes(session_ids: list[str], scope: str) -> None:
    """The run's containers, then its sessions' volumes."""
    remove_containers(f"pg-shell.scope={scope}")
    names = [f"pg-shell-home-{sid}" for sid in session_ids]
    for chunk in range(0, len(names), 100):
        subprocess.run(["docker", "volume", "rm", "-f", *names[chunk:chunk + 100]],
                       capture_output=True, check=False)


def problems(result: LoadResult) -> list[str]:
    """What the run got wrong: order, losses, duplicates, idle executors."""
    found = []
    expected = [str(i) for i in range(result.per_session)]
    by_session: dict[str, list[dict[str, Any]]] = {}
    for row in result.rows:
        by_session.setdefault(row["session_id"], []).append(row)
    if len(result.rows) != result.sessions * result.per_session:
        expected_rows = result.sessions * result.per_session
        found.append(f"{len(result.rows)} commands, expected {expected_rows}")
    not_done = [r["id"] for r in result.rows if (r["status"], r["exit_code"]) != ("done", 0)]
    if not_done:
        found.append(f"{len(not_done)} commands not done with exit 0, e.g. {not_done[:5]}")
    retried = [r["id"] for r in result.rows if r["attempts"] != 1]
    if retried:
        found.append(f"{len(retried)} commands with attempts != 1, e.g. {retried[:5]}")
    for sid, rows in by_session.items():
        outputs = [(r["output"] or "").strip() for r in rows]
        if outputs != expected:
            found.append(f"session {sid}: outputs {outputs}")
        if result.files.get(sid) != expected:
            found.append(f"session {sid}: order.log is {result.files.get(sid)}")
        for before, after in zip(rows, rows[1:]):
            if not (before["completed_at"] <= after["started_at"] < after["completed_at"]):
                found.append(f"session {sid}: command {after['id']} started before "
                             f"{before['id']} completed")
    idle = [w for w, n in result.per_worker.items() if n == 0]
    if idle:
        found.append(f"executors that did nothing: {idle}")
    return found


# -- the bench -------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.many_hosts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dsn_option(parser)
    add_image_option(parser)
    parser.add_argument("--executors", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=4,
                        help="PG_SHELL_CONCURRENCY of each executor")
    args = parser.parse_args()
    admin_dsn = require_dsn(parser, args)
    image = image_id(args.image)
    rates: dict[int, float] = {}
    failures = 0
    for executors in sorted({1, args.executors}):
        scope = f"bench-hosts-{secrets.token_hex(4)}"
        with (migrated_database(admin_dsn, "pgshell_bench_hosts") as dsn,
              tempfile.TemporaryDirectory(prefix="pg-shell-bench-hosts-") as tmp):
            log(f"{executors} executor(s): {args.sessions} x {args.per_session}")
            result = run_load(dsn, image, executors=executors, sessions=args.sessions,
                              per_session=args.per_session, concurrency=args.concurrency,
                              work_dir=Path(tmp), scope=scope)
        wrong = problems(result)
        for problem in wrong[:20]:
            log(f"PROBLEM: {problem}")
        failures += bool(wrong)
        for line in result.figures(concurrency_each=args.concurrency, correct=not wrong):
            REPORT.emit(line)
        rates[executors] = len(result.rows) / result.elapsed_s
    if args.executors != 1:
        REPORT.emit_figure("throughput_ratio", rates[args.executors] / rates[1], "ratio",
                           ours_over=f"{args.executors} executors / 1 executor",
                           note="one engine and one 2-core machine shared by all executors")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
