"""A tenant's stored output is bounded (max_output_bytes, set in MiB), and
stored once: the streamed chunks are the output, the command's row keeps no
second copy, and everything that reads output (listings, the audit chain,
replay's timeline) reads the chunks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg2

from tests.db.api_helpers import run, sqlstate, superuser_rows
from tests.support import call, create_user, one, tenant

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def fill(db: str, conn, sid: str, n: int, size: int) -> None:
    """Runs n commands of ``size`` bytes of output each, as an executor would."""
    for i in range(n):
        cid = one(conn, "SELECT shell_api.submit_command(%s, %s)", (sid, f"yes | head -c {size}"))
        run(db, cid, chr(ord("a") + i) * size)


def test_past_the_output_quota_submitting_fails_with_429_naming_the_quota(db):
    conn = tenant(db, create_user(db, "alice"))
    sid = one(conn, "SELECT shell_api.create_session('main')")
    set_quota = "SELECT * FROM shell.set_user_quota('alice', p_max_output_mb => %s)"
    assert [r["max_output_mb"] for r in superuser_rows(db, set_quota, (1,))] == [1]
    fill(db, conn, sid, 2, MIB // 2)  # exactly the quota
    code, message = sqlstate(conn, "SELECT shell_api.submit_command(%s, 'echo more')", (sid,))
    assert code == "PT429"
    assert "stored output quota reached" in message and str(MIB) in message
    # Raising it lets the tenant go on; the quota counts only their own output.
    superuser_rows(db, set_quota, (2,))
    assert one(conn, "SELECT shell_api.submit_command(%s, 'echo more')", (sid,)) > 0
    bob = tenant(db, create_user(db, "bob"))
    bob_sid = one(bob, "SELECT shell_api.create_session('b')")
    superuser_rows(db, "SELECT * FROM shell.set_user_quota('bob', p_max_output_mb => 1)")
    assert one(bob, "SELECT shell_api.submit_command(%s, 'echo hi')", (bob_sid,)) > 0


def test_the_other_quotas_are_left_as_they_are_and_a_negative_one_is_refused(db):
    create_user(db, "alice")
    rows = superuser_rows(db, "SELECT * FROM shell.set_user_quota('alice', 5, NULL, NULL, 3)")
    assert [(r["max_sessions"], r["max_output_mb"]) for r in rows] == [(5, 3)]
    rows = superuser_rows(db, "SELECT * FROM shell.set_user_quota('alice', NULL, NULL, 9)")
    assert [(r["max_sessions"], r["max_queued"], r["max_output_mb"]) for r in rows] == [(5, 9, 3)]
    conn = psycopg2.connect(db)
    try:
        assert sqlstate(conn, "SELECT * FROM shell.set_user_quota('alice', NULL, NULL, NULL, -1)"
                        )[0] == "22023"
    finally:
        conn.close()


def test_output_is_stored_once_and_read_from_the_chunks(db):
    conn = tenant(db, create_user(db, "alice"))
    sid = one(conn, "SELECT shell_api.create_session('main')")
    fill(db, conn, sid, 3, 64 * 1024)
    stored = superuser_rows(db, """
        SELECT (SELECT count(*) FROM shell.commands WHERE output IS NOT NULL) AS whole_copies,
               (SELECT sum(octet_length(data)) FROM shell.output_chunks) AS chunk_bytes,
               (SELECT sum(output_bytes) FROM shell.commands) AS counted""")[0]
    assert stored == {"whole_copies": 0, "chunk_bytes": 3 * 64 * 1024, "counted": 3 * 64 * 1024}
    rows = call(conn, "SELECT output FROM shell_api.latest_output(%s, 0, 3)", (sid,))
    assert [r["output"] for r in rows] == [c * 64 * 1024 for c in "abc"]


def test_pg_shell_user_quota_sets_the_output_quota(db):
    create_user(db, "alice")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    env["DATABASE_URL"] = db
    done = subprocess.run([sys.executable, "-m", "executor.cli.main", "user", "quota", "alice",
                           "--output-mb", "7", "--json"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["max_output_mb"] == 7
    done = subprocess.run([sys.executable, "-m", "executor.cli.main", "user", "quota", "alice",
                           "--sessions", "4", "--files-mb", "3", "--uploads-per-minute", "5",
                           "--terminal-idle-s", "60"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(
        "output 7 MiB, files 3 MiB, 10000 entries a directory, 200000 a home, 5 uploads a minute, "
        "terminals idle 60 s and at most 7200 s, 100 inputs a second")
