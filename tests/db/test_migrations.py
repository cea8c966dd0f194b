"""The migration runner against empty databases created here: a fresh and a
step-by-step install end with the same schema, re-running is a silent no-op,
status tells the truth, history is checked, and concurrent runs serialize."""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator

import pytest

from executor.db import migrations, schema_snapshot
from executor.db.connection import connect, query
from executor.errors import MigrationError
from tests.conftest import require, with_database

VERSIONED, _ = migrations.discover()
NAMES = [s.name for s in VERSIONED]


@pytest.fixture
def empty_db(admin_dsn: str) -> Iterator:
    """Creates empty databases on demand (as DSNs) and drops them all at the end."""
    created: list[str] = []
    admin = connect(admin_dsn)

    def make() -> str:
        name = f"pgshell_m_{uuid.uuid4().hex[:12]}"
        query(admin, f'CREATE DATABASE "{name}"')
        created.append(name)
        return with_database(admin_dsn, name)

    yield make
    for name in created:
        query(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


def schema_dump(dsn: str) -> str:
    """The schema as pg_dump prints it (with privileges), minus comments and
    the per-run \\restrict key."""
    pg_dump = schema_snapshot.pg_dump_binary()
    require(pg_dump is not None, "pg_dump")
    out = subprocess.run([pg_dump, "--schema-only", "--no-owner", f"--dbname={dsn}"],
                         check=True, capture_output=True, text=True).stdout
    lines = [line for line in out.splitlines()
             if line and not line.startswith("--")
             and not line.startswith(("\\restrict", "\\unrestrict"))]
    return "\n".join(lines)


def migrate_in_new_connection(dsn: str, **kwargs) -> list[str]:
    conn = connect(dsn)
    try:
        return migrations.migrate(conn, **kwargs)
    finally:
        conn.close()


def recorded(dsn: str) -> dict[str, str]:
    conn = connect(dsn)
    try:
        return {r["name"]: r["checksum"]
                for r in query(conn, "SELECT name, checksum FROM shell.migrations")}
    finally:
        conn.close()


def test_a_fresh_install_and_a_step_by_step_upgrade_end_with_the_same_schema(empty_db):
    fresh, stepped = empty_db(), empty_db()
    assert migrate_in_new_connection(fresh) == NAMES + ["grants"]

    for number, name in enumerate(NAMES, start=1):
        applied = migrate_in_new_connection(stepped, to=number)
        # Grants wait until every migration is in.
        assert applied == ([name] if number < len(NAMES) else [name, "grants"])
    assert migrate_in_new_connection(stepped) == []

    fresh_schema, stepped_schema = schema_dump(fresh), schema_dump(stepped)
    assert "CREATE FUNCTION shell.claim_commands" in fresh_schema
    assert "GRANT" in fresh_schema
    assert stepped_schema == fresh_schema
    assert recorded(stepped) == recorded(fresh)


def test_re_running_migrate_applies_nothing_changes_nothing_and_prints_no_notices(empty_db):
    dsn = empty_db()
    migrate_in_new_connection(dsn)
    before = schema_dump(dsn)
    conn = connect(dsn)
    try:
        del conn.notices[:]
        for _ in range(2):
            assert migrations.migrate(conn) == []
        assert conn.notices == []
    finally:
        conn.close()
    assert schema_dump(dsn) == before


def test_status_lists_what_is_applied_and_what_is_pending(empty_db):
    dsn = empty_db()
    conn = connect(dsn)
    try:
        def states() -> list[tuple[str, str, bool]]:
            return [(s.name, s.state, s.applied_at is not None) for s in migrations.status(conn)]

        assert states() == [(n, "pending", False) for n in NAMES] + [("grants", "pending", False)]
        migrations.migrate(conn, to=2)
        assert states() == ([(n, "applied", True) for n in NAMES[:2]]
                            + [(n, "pending", False) for n in NAMES[2:]]
                            + [("grants", "pending", False)])
        migrations.migrate(conn)
        assert states() == [(n, "applied", True) for n in NAMES] + [("grants", "applied", True)]
    finally:
        conn.close()


def test_changed_grants_show_as_changed_and_are_re_applied_alone(empty_db):
    dsn = empty_db()
    migrate_in_new_connection(dsn)
    before = schema_dump(dsn)
    conn = connect(dsn)
    try:
        query(conn, "UPDATE shell.migrations SET checksum = 'older' WHERE name = 'grants'")
        assert migrations.status(conn)[-1].state == "changed"
        assert migrations.migrate(conn) == ["grants"]
        assert migrations.status(conn)[-1].state == "applied"
    finally:
        conn.close()
    assert schema_dump(dsn) == before


def test_an_applied_migration_that_was_edited_stops_migrate(empty_db):
    dsn = empty_db()
    migrate_in_new_connection(dsn, to=3)
    conn = connect(dsn)
    try:
        query(conn, "UPDATE shell.migrations SET checksum = 'edited' WHERE name = %s", (NAMES[1],))
        before = schema_dump(dsn)
        with pytest.raises(MigrationError, match=f"{NAMES[1]} was edited"):
            migrations.migrate(conn)
        # Nothing after it was applied, and the lock was let go.
        assert schema_dump(dsn) == before
        assert set(recorded(dsn)) == set(NAMES[:3])
        other = connect(dsn)
        try:
            assert query(other, "SELECT pg_try_advisory_lock(%s) AS got",
                         (migrations._LOCK_KEY,))[0]["got"]
        finally:
            other.close()
    finally:
        conn.close()


def test_a_database_with_an_unknown_migration_stops_migrate(empty_db):
    dsn = empty_db()
    migrate_in_new_connection(dsn)
    conn = connect(dsn)
    try:
        query(conn,
              "INSERT INTO shell.migrations (name, checksum) VALUES ('9999_from_the_future', 'x')")
        with pytest.raises(MigrationError, match="9999_from_the_future"):
            migrations.migrate(conn)
    finally:
        conn.close()


def test_two_concurrent_migrates_both_succeed_and_apply_everything_once(empty_db):
    dsn, reference = empty_db(), empty_db()
    migrate_in_new_connection(reference)
    conns = [connect(dsn) for _ in range(2)]
    start = threading.Barrier(2)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run(conn) -> None:
        try:
            start.wait()
            results.append(migrations.migrate(conn))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns:
        c.close()
    assert errors == []
    assert sorted(results, key=len) == [[], NAMES + ["grants"]]
    assert schema_dump(dsn) == schema_dump(reference)
    assert recorded(dsn) == recorded(reference)
