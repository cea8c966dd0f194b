"""Numbered migrations from sql/migrations, applied in order, each in its own
transaction and recorded; sql/grants.sql is re-applied whenever it changes."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor.db.connection import Connection, query, transaction
from executor.errors import MigrationError
from executor.resources import resource_dir

SQL_DIR = resource_dir("sql")
GRANTS = "grants"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# Serializes concurrent `migrate` runs against one database.
_LOCK_KEY = 0x7067_7368_656C_6C  # "pgshell"


@dataclass(frozen=True)
class Script:
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class ScriptStatus:
    name: str
    applied_at: str | None
    state: str  # "applied", "pending", "changed" (grants only)


def discover(sql_dir: Path = SQL_DIR) -> tuple[list[Script], Script]:
    """The versioned migrations in order, and the grants script."""
    versioned = []
    for path in sorted((sql_dir / "migrations").glob("*.sql")):
        if not _NAME.match(path.name):
            raise MigrationError(f"{path.name}: migration files are named NNNN_snake_case.sql")
        versioned.append(Script(path.stem, path.read_text()))
    numbers = [int(s.name[:4]) for s in versioned]
    if numbers != list(range(1, len(numbers) + 1)):
        raise MigrationError(f"migrations must be numbered 0001, 0002, ... without gaps: {numbers}")
    return versioned, Script(GRANTS, (sql_dir / "grants.sql").read_text())


def _bootstrap(conn: Connection) -> None:
    # Checked in the catalog rather than with IF NOT EXISTS, which would
    # print a notice on every re-run.
    exists = query(conn,
                   "SELECT to_regclass('shell.migrations') IS NOT NULL AS present")[0]["present"]
    if exists:
        return
    with transaction(conn) as cur:
        if not query(conn, "SELECT 1 FROM pg_namespace WHERE nspname = 'shell'"):
            cur.execute("CREATE SCHEMA shell")
        cur.execute(
            "CREATE TABLE shell.migrations ("
            " name text PRIMARY KEY, checksum text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )


def _applied(conn: Connection) -> dict[str, dict[str, Any]]:
    return {r["name"]: r
            for r in query(conn, "SELECT name, checksum, applied_at::text FROM shell.migrations")}


def _check_history(versioned: list[Script], applied: dict[str, dict[str, Any]]) -> None:
    known = {s.name: s for s in versioned}
    for name, row in applied.items():
        if name == GRANTS:
            continue
        if name not in known:
            raise MigrationError(f"the database has migration {name}, which this "
                                 "version does not know")
        if known[name].checksum != row["checksum"]:
            raise MigrationError(f"migration {name} was edited after it was applied")


def status(conn: Connection, sql_dir: Path = SQL_DIR) -> list[ScriptStatus]:
    versioned, grants = discover(sql_dir)
    present = query(conn, "SELECT to_regclass('shell.migrations') IS NOT NULL AS p")[0]["p"]
    applied = _applied(conn) if present else {}
    rows = [
        ScriptStatus(s.name, applied.get(s.name, {}).get("applied_at"),
                     "applied" if s.name in applied else "pending")
        for s in versioned
    ]
    g = applied.get(GRANTS)
    state = "pending" if g is None else ("applied" if g["checksum"] == grants.checksum
                                         else "changed")
    rows.append(ScriptStatus(GRANTS, g["applied_at"] if g else None, state))
    return rows


def migrate(
    conn: Connection,
    *,
    to: int | None = None,
    sql_dir: Path = SQL_DIR,
    progress: Callable[[str], None] = lambda _: None,
) -> list[str]:
    """Applies what is pending (up to migration number ``to``); returns the
    names applied. Grants are applied only once every migration is."""
    versioned, grants = discover(sql_dir)
    query(conn, "SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
    try:
        _bootstrap(conn)
        applied = _applied(conn)
        _check_history(versioned, applied)
        done = []
        for script in versioned:
            if to is not None and int(script.name[:4]) > to:
                break
            if script.name in applied:
                continue
            progress(f"applying {script.name}")
            _apply(conn, script)
            done.append(script.name)
        at_head = all(s.name in applied or s.name in done for s in versioned)
        recorded = applied.get(GRANTS, {}).get("checksum")
        # A migration may drop and make again a function whose grant is
        # unchanged: grants follow every migration, and any change of theirs.
        if at_head and (done or recorded != grants.checksum):
            progress("applying grants")
            _apply(conn, grants)
            done.append(GRANTS)
        return done
    finally:
        query(conn, "SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))


def _apply(conn: Connection, script: Script) -> None:
    with transaction(conn) as cur:
        cur.execute(script.sql)
        cur.execute(
            "INSERT INTO shell.migrations (name, checksum) VALUES (%s, %s)"
            " ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()",
            (script.name, script.checksum),
        )
