"""sql/schema.sql is the schema the migrations build: a database migrated by
the runner, dumped and normalized as ops/schema-snapshot does it, equals the
committed file; and ops/schema-snapshot writes exactly that."""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

import pytest

from executor.db import schema_snapshot
from executor.db.connection import connect, query
from tests.conftest import require

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]
STALE = ("sql/schema.sql differs from the schema that sql/migrations build. Run "
         "ops/schema-snapshot and commit sql/schema.sql. (A migration that landed is never edited: "
         "a change to the schema comes as a new numbered file.)")


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
