"""sql/schema.sql is the schema the migrations build: a database migrated by
the runner, dumped and normalized as ops/schema-snapshot does it, equals the
committed file; and ops/schema-snapshot writes exactly that. Every function
and table in it carries a comment, so it can be read without the history."""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

import pytest

from executor.db import schema_snapshot
from executor.db.connection import connect, query
from tests.conftest import require
from tests.db.api_helpers import superuser_rows

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]
STALE = ("sql/schema.sql differs from the schema that sql/migrations build. Run "
         "ops/schema-snapshot and commit sql/schema.sql. (A migration that landed is never edited: "
         "a change to the schema comes as a new numbered file.)")


# Every function of shell_api and shell (pgcrypto's, installed in shell, aside: the extension's
# own) and every table of shell, with its comment.
DOCUMENTED = """
SELECT 'function' AS kind, p.oid::regprocedure::text AS name,
       obj_description(p.oid, 'pg_proc') AS comment
FROM pg_proc p
WHERE p.pronamespace IN ('shell'::regnamespace, 'shell_api'::regnamespace)
  AND NOT EXISTS (SELECT FROM pg_depend d
                  WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
UNION ALL
SELECT 'table', c.oid::regclass::text, obj_description(c.oid, 'pg_class')
FROM pg_class c
WHERE c.relnamespace = 'shell'::regnamespace AND c.relkind IN ('r', 'p')
ORDER BY 1, 2
"""
UNCOMMENTED = ("These have no comment, so sql/schema.sql does not say what they are. Add a "
               "COMMENT ON FUNCTION (or TABLE) in the migration that creates them: what it does, "
               "who calls it, what it returns, the SQLSTATEs it refuses with (the style of "
               "sql/migrations/0032_comments.sql).")


def diff(committed: str, built: str) -> str:
    lines = difflib.unified_diff(committed.splitlines(keepends=True),
                                 built.splitlines(keepends=True),
                                 "sql/schema.sql (committed)", "what the migrations build", n=2)
    text = "".join(lines)
    return text if len(text) < 6000 else text[:6000] + "\n[… diff cut]\n"


def test_the_committed_schema_snapshot_is_what_the_migrations_build(db: str) -> None:
    # `db` is a copy of the template that conftest migrates from empty with the runner.
    require(schema_snapshot.pg_dump_binary() is not None, "pg_dump")
    built = schema_snapshot.dump(db)
    committed = schema_snapshot.SNAPSHOT.read_text() if schema_snapshot.SNAPSHOT.exists() else ""
    assert "CREATE FUNCTION shell.claim_commands" in built
    if committed != built:
        pytest.fail(f"{STALE}\n\n{diff(committed, built)}", pytrace=False)


def test_ops_schema_snapshot_writes_what_the_migrations_build(admin_dsn: str, db: str,
                                                              tmp_path: Path) -> None:
    require(schema_snapshot.pg_dump_binary() is not None, "pg_dump")
    out = tmp_path / "schema.sql"
    env = {**os.environ, "DATABASE_URL": admin_dsn}
    done = subprocess.run([str(REPO / "ops" / "schema-snapshot"), str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "wrote " in done.stderr
    assert out.read_text() == schema_snapshot.dump(db)
    assert not Path(f"{out}.tmp").exists()
    admin = connect(admin_dsn)
    try:
        left = query(admin,
                     "SELECT datname FROM pg_database WHERE datname LIKE 'pgshell_snapshot_%'")
    finally:
        admin.close()
    assert left == [], "ops/schema-snapshot left its scratch database behind"


def test_every_function_and_table_has_a_comment(db: str) -> None:
    rows = superuser_rows(db, DOCUMENTED)
    names = {r["name"] for r in rows}
    # The catalog query sees the schema (an empty answer would pass vacuously), the
    # executor's and the administrators' entry points among it.
    assert {"shell_api.login(text,text)", "shell.jwt_secret()", "shell.users"} <= names
    assert any(n.startswith("shell.claim_commands(") for n in names)
    missing = [f"{r['kind']} {r['name']}" for r in rows if not (r["comment"] or "").strip()]
    if missing:
        pytest.fail(f"{UNCOMMENTED}\n\n" + "\n".join(missing), pytrace=False)
