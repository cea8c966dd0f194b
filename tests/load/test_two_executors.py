"""Many hosts: two executor processes (distinct PG_SHELL_WORKER_ID, one
PG_SHELL_SCOPE) share one database and one engine and run 200 sessions x 10
commands. Per-session order holds, nothing is lost, nothing runs twice, and
both executors work. The figures are printed as JSON lines (pytest -s) and
recorded as properties; they are never asserted (bench.many_hosts compares
against one executor)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from bench import many_hosts

pytestmark = [pytest.mark.postgres, pytest.mark.docker]

SESSIONS, PER_SESSION = 200, 10
# Two cores shared with the engine, PostgreSQL and other test runs: a few
# containers at a time per executor keeps the run to a few minutes.
CONCURRENCY = 3


# The wait fails when no command finished for bench.common.STALL_S, saying how
# many had; this is only a last resort against a hang outside it.
@pytest.mark.timeout(4 * 3600)
def test_two_executors_share_the_work_keep_each_sessions_order_and_run_nothing_twice(
        db, sandbox_image, tmp_path: Path, record_property):
    result = many_hosts.run_load(db, sandbox_image, executors=2, sessions=SESSIONS,
                                 per_session=PER_SESSION, concurrency=CONCURRENCY,
                                 work_dir=tmp_path,
                                 scope=f"pgtest-load-{secrets.token_hex(4)}")
    for line in result.figures(concurrency_each=CONCURRENCY):
        print(json.dumps(line))
        record_property(line["metric"], line["value"])

    assert len(result.rows) == SESSIONS * PER_SESSION
    # A shared engine restarted mid-run (another test run's dockerd restart)
    # shows here as "engine error" failures: by design, never re-run.
    odd = [(r["id"], r["status"], r["exit_code"], r["attempts"], r["reason"]) for r in result.rows
           if (r["status"], r["exit_code"], r["attempts"]) != ("done", 0, 1)]
    assert odd == [], odd[:10]
    by_session: dict[str, list[dict]] = {}
    for row in result.rows:
        by_session.setdefault(row["session_id"], []).append(row)
    expected = [str(i) for i in range(PER_SESSION)]
    assert len(by_session) == SESSIONS
    for session_id, rows in by_session.items():
        assert [r["output"] for r in rows] == [f"{i}\n" for i in range(PER_SESSION)], session_id
        assert result.files[session_id] == expected, session_id  # ran once each, in order
        for before, after in zip(rows, rows[1:]):
            assert before["completed_at"] <= after["started_at"] < after["completed_at"], session_id
    assert sum(result.per_worker.values()) == SESSIONS * PER_SESSION
    assert all(n > 0 for n in result.per_worker.values()), result.per_worker
    assert many_hosts.problems(result) == []
