"""Cost of claiming: claim + mark_started + complete per command, for one
worker claiming in batches, with 1 k sessions that have pending work, at
several sizes of finished history in shell.commands.

The design promises claiming costs the same with 10 or 10 million rows of
history; this prints the cost at each size and the ratio of the largest to
the smallest (target 1.5). Each size gets its own database, built from
scratch with the migration runner and dropped afterwards.

    .venv/bin/python -m bench.claim --sizes 10000,1000000

Prints one JSON object per line on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
import time
import uuid
from typing import Any

from bench.common import (
    Report,
    add_dsn_option,
    migrated_database,
    quantile_nearest_rank,
    require_dsn,
)
from executor.db.connection import Connection, connect, query
from executor.errors import PgShellError

TARGET_RATIO = 1.5
REPORT = Report("claim")
log = REPORT.log


def load(conn: Connection, *, history: int, sessions: int, users: int, pending_per_session: int,
         chunks: bool) -> None:
    """Bulk-loads users, sessions with their lanes, ``history`` finished
    commands spread over the sessions, then the pending work."""
    t0 = time.perf_counter()
    query(conn, """
        INSERT INTO shell.users (username, password_hash, max_sessions, max_running, max_queued)
        SELECT 'bench' || g, 'x', 100000, 100000, 10000000 FROM generate_series(1, %s) g""",
          (users,))
    query(conn, """
        INSERT INTO shell.sessions (user_id, name)
        SELECT u.id, 'bench ' || g
        FROM generate_series(0, %s - 1) g
        JOIN (SELECT id, row_number() OVER (ORDER BY username) - 1 AS n FROM shell.users) u
          ON u.n = g %% %s""", (sessions, users))
    query(conn,
          "INSERT INTO shell.lanes (session_id, user_id) SELECT id, user_id FROM shell.sessions")
    log(f"loading {history:,} rows of finished history")
    # Finished commands, oldest first, interleaved over the sessions.
    query(conn, """
        WITH s AS (SELECT id, user_id, row_number() OVER (ORDER BY id) - 1 AS n FROM shell.sessions)
        INSERT INTO shell.commands (
            session_id, user_id, command, status,
            submitted_at, claimed_at, started_at, completed_at,
            worker_id, attempts, exit_code, duration_ms, reason, output, output_bytes,
            cwd_before, env_before, cwd_after, env_after, image_digest, container_id, change_seq)
        SELECT s.id, s.user_id, 'echo history ' || g,
               CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'done' END,
               t, t + interval '1 ms', t + interval '2 ms', t + interval '40 ms',
               'history-worker', 1, CASE WHEN g %% 50 = 0 THEN 1 ELSE 0 END, 38, NULL,
               'history ' || g || E'\n', 9 + length(g::text),
               '/home/sandbox', '{}'::jsonb, '/home/sandbox', '{}'::jsonb,
               'sha256:bench', 'c' || g, g
        FROM generate_series(1, %s) g
        JOIN s ON s.n = g %% %s
        CROSS JOIN LATERAL (SELECT now() - interval '1 year' + g * interval '10 ms' AS t) ts""",
          (history, sessions))
    if chunks:
        log("loading one output chunk per history command")
        query(conn, """
            INSERT INTO shell.output_chunks (command_id, seq, created_at, data)
            SELECT id, 0, completed_at, output FROM shell.commands""")
    # The work to claim: pending commands on every session, as enqueue leaves them.
    query(conn, """
        INSERT INTO shell.commands (session_id, user_id, command, change_seq)
        SELECT s.id, s.user_id, 'echo pending ' || k, 0
        FROM shell.sessions s CROSS JOIN generate_series(1, %s) k
        ORDER BY k, s.id""", (pending_per_session,))
    query(conn, """
        UPDATE shell.lanes l SET pending = p.n, ready_since = p.first, change_seq = p.seq
        FROM (SELECT session_id, count(*) FILTER (WHERE status = 'pending') AS n,
                     min(submitted_at) FILTER (WHERE status = 'pending') AS first, count(*) AS seq
              FROM shell.commands GROUP BY session_id) p
        WHERE p.session_id = l.session_id""")
    log(f"loaded in {time.perf_counter() - t0:.1f} s; vacuum analyze")
    query(conn, "VACUUM (ANALYZE) shell.commands")
    query(conn, "VACUUM (ANALYZE) shell.lanes")
    query(conn, "VACUUM (ANALYZE) shell.sessions")
    query(conn, "VACUUM (ANALYZE) shell.output_chunks")
    query(conn, "VACUUM (ANALYZE) shell.users")


def run_claims(conn: Connection, *, commands: int, batch: int, warmup: int) -> list[float]:
    """Claims, starts and completes ``commands`` commands in batches; the
    cost per command of each batch, in ms (warm-up batches left out)."""
    worker = f"bench-{uuid.uuid4().hex[:8]}"
    per_command: list[float] = []
    done = 0
    batches = 0
    while done < commands:
        t0 = time.perf_counter()
        claimed = query(conn, "SELECT command_id, attempt FROM shell.claim_commands(%s, %s, 30)",
                        (worker, batch))
        if not claimed:
            raise SystemExit("bench.claim: nothing left to claim (too little pending work was "
                             "loaded)")
        for c in claimed:
            query(conn, "SELECT shell.mark_started(%s, %s, %s, %s, %s)",
                  (c["command_id"], worker, c["attempt"], f"ctr-{c['command_id']}", "sha256:bench"))
            query(conn, "SELECT shell.complete_command(%s, %s, %s, %s)",
                  (c["command_id"], worker, c["attempt"],
                   '{"status": "done", "exit_code": 0, "duration_ms": 1}'))
        elapsed_ms = (time.perf_counter() - t0) * 1000
        batches += 1
        if batches > warmup:
            per_command.append(elapsed_ms / len(claimed))
            done += len(claimed)
    return per_command


def prepare(dsn: str, history: int, args: argparse.Namespace) -> None:
    """Loads ``history`` rows of history and the pending work into the migrated database ``dsn``."""
    su = connect(dsn)
    try:
        measured = args.commands + args.rounds * args.warmup * args.batch
        pending = math.ceil(measured / args.sessions) + 1
        load(su, history=history, sessions=args.sessions, users=args.users,
             pending_per_session=pending, chunks=args.chunks)
    finally:
        su.close()


def measure(dsn: str, commands: int, args: argparse.Namespace) -> list[float]:
    ex = connect(dsn, role="shell_executor")
    try:
        return run_claims(ex, commands=commands, batch=args.batch, warmup=args.warmup)
    finally:
        ex.close()


def summary(history: int, samples: list[float], args: argparse.Namespace) -> dict[str, Any]:
    return {"metric": "claim_complete_per_command", "history_rows": history,
            "value": round(statistics.fmean(samples), 4), "unit": "ms",
            "p50": round(quantile_nearest_rank(samples, 0.5), 4),
            "p90": round(quantile_nearest_rank(samples, 0.9), 4),
            "commands": len(samples) * args.batch, "sessions": args.sessions, "batch": args.batch,
            "rounds": args.rounds}


def explain(conn: Connection) -> None:
    """The plans of the claim's statements, on stderr (see --explain)."""
    query(conn, "LOAD 'auto_explain'")
    for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_analyze = on",
                    "auto_explain.log_nested_statements = on", "client_min_messages = log",
                    "auto_explain.log_level = notice"):
        query(conn, f"SET {setting}")
    del conn.notices[:]
    query(conn, "BEGIN")
    query(conn, "SELECT * FROM shell.claim_commands('explain', 10, 30)")
    query(conn, "ROLLBACK")
    for notice in conn.notices:
        print(notice.rstrip(), file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.claim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dsn_option(parser)
    parser.add_argument("--sizes", default="10000,1000000",
                        help="history rows per run, comma-separated (e.g. 10000,1000000,10000000)")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions with pending work")
    parser.add_argument("--users", type=int, default=10, help="tenants owning the sessions")
    parser.add_argument("--commands", type=int, default=3000, help="commands measured per size")
    parser.add_argument("--batch", type=int, default=10, help="claim batch size")
    parser.add_argument("--warmup", type=int, default=10,
                        help="batches run before measuring, per round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved measuring rounds per size")
    parser.add_argument("--chunks", action="store_true",
                        help="also load one output chunk per history row")
    parser.add_argument("--explain", action="store_true", help="print the claim's plans on stderr")
    args = parser.parse_args()
    admin_dsn = require_dsn(parser, args)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes:
        parser.error("--sizes needs at least one size")

    # Every size is loaded first, then measured in interleaved rounds, so a
    # noisy neighbour on the machine weighs on all sizes alike.
    databases: list[tuple[int, str]] = []
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    try:
        with contextlib.ExitStack() as dropped_at_the_end:
            for history in sizes:
                dsn = dropped_at_the_end.enter_context(
                    migrated_database(admin_dsn, "pgshell_bench", progress=log))
                prepare(dsn, history, args)
                databases.append((history, dsn))
            per_round = math.ceil(args.commands / args.rounds)
            for r in range(args.rounds):
                for history, dsn in databases:
                    log(f"round {r + 1}/{args.rounds}, history {history:,}: {per_round:,} commands")
                    samples[history] += measure(dsn, per_round, args)
            if args.explain:
                for history, dsn in databases:
                    log(f"plans with {history:,} rows of history")
                    su = connect(dsn)
                    try:
                        explain(su)
                    finally:
                        su.close()
    except PgShellError as exc:
        print(f"bench.claim: {exc}", file=sys.stderr)
        return 1
    results = []
    for history in sizes:
        result = summary(history, samples[history], args)
        results.append(result)
        REPORT.emit(result)
        log(f"history {history:,}: {result['value']} ms per command "
            f"(p50 {result['p50']}, p90 {result['p90']})")
    if len(results) > 1:
        smallest = min(results, key=lambda r: r["history_rows"])
        largest = max(results, key=lambda r: r["history_rows"])
        REPORT.emit({"metric": "ratio_largest_vs_smallest",
                     "value": round(largest["value"] / smallest["value"], 3), "unit": "x",
                     "target": TARGET_RATIO, "smallest": smallest["history_rows"],
                     "largest": largest["history_rows"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
