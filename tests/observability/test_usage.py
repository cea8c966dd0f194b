"""`pg-shell usage` over DATABASE_URL: per-user usage of the commands that
ended since the consumer's committed watermark, so repeated runs are
incremental and each consumer keeps its own."""

from __future__ import annotations

import csv
import datetime
import io
from pathlib import Path
from typing import Any

import pytest

from tests.observability.conftest import Cli, Tenant

pytestmark = [pytest.mark.postgres, pytest.mark.docker]


def report(cli: Cli, *args: str) -> dict[str, dict[str, Any]]:
    result = cli("usage", "--csv", *args)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert result.stdout.splitlines()[0] == (
        "user_id,username,commands,run_ms,output_bytes,from_time,until_time")
    return {r["username"]: r for r in rows}


def usage_of(tenant: Tenant, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"user_id": tenant.user_id, "commands": str(len(rows)),
            "run_ms": str(sum(r["duration_ms"] for r in rows)),
            "output_bytes": str(sum(r["output_bytes"] for r in rows))}


def picked(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("user_id", "commands", "run_ms", "output_bytes")}


def test_usage_reports_per_user_and_each_run_only_what_ended_since_the_last(
        db, make_tenant, metrics_daemon, tmp_path: Path):
    cli = Cli("http://127.0.0.1:9", tmp_path, database_url=db)
    alice, bob = make_tenant("alice"), make_tenant("bob")
    alice_ran = [alice.run("echo one"), alice.run("echo two; exit 4")]
    bob_ran = [bob.run("seq 1 100")]

    first = report(cli, "--since", "1d")
    assert {name: picked(row) for name, row in first.items()} == \
        {"alice": usage_of(alice, alice_ran), "bob": usage_of(bob, bob_ran)}
    assert first["alice"]["until_time"] == first["bob"]["until_time"]

    assert report(cli, "--since", "1d") == {}  # nothing ended since

    later = [alice.run("echo three")]
    third = report(cli)
    assert {name: picked(row) for name, row in third.items()} == {"alice": usage_of(alice, later)}
    # Windows follow each other (the empty second run's lies between).
    assert datetime.datetime.fromisoformat(third["alice"]["from_time"]) > \
        datetime.datetime.fromisoformat(first["alice"]["until_time"])

    # Another consumer has its own watermark: its first run sees everything.
    billing = report(cli, "--consumer", "billing")
    assert {name: picked(row) for name, row in billing.items()} == \
        {"alice": usage_of(alice, alice_ran + later), "bob": usage_of(bob, bob_ran)}
    # --since bounds a consumer's first run.
    now = datetime.datetime.now(datetime.UTC).isoformat()
    assert report(cli, "--consumer", "fresh", "--since", now) == {}


def test_usage_prints_a_table_and_rejects_a_bad_since(db, make_tenant, metrics_daemon,
                                                      tmp_path: Path):
    cli = Cli("http://127.0.0.1:9", tmp_path, database_url=db)
    alice = make_tenant("alice")
    alice.run("echo one")
    table = cli("usage")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["USER", "COMMANDS", "RUN", "TIME", "(s)", "OUTPUT", "BYTES", "USER",
                                "ID"]
    assert lines[1].split()[:2] == ["alice", "1"] and lines[1].split()[-1] == alice.user_id
    assert table.stderr.startswith("usage from ")
    bad = cli("usage", "--since", "yesterday")
    assert bad.returncode == 1, bad.stderr
    assert bad.stderr.startswith("pg-shell: --since 'yesterday'"), bad.stderr
