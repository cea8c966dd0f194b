"""ops/ha: a replicated PostgreSQL under Patroni (a primary, a synchronous
replica, a single-node etcd) survives the crash of its primary.

What this shows: a row committed through the multi-host DSN (with
target_session_attrs=read-write) is still there after the primary's Patroni,
postmaster and postgres children are SIGKILLed at once; the same DSN reaches
the promoted replica and can write again; the old primary, started again,
is rewound and comes back as the synchronous standby and sees new writes;
`ops/ha stop` leaves no process of the cluster behind.

The time from the kill to the first successful write is printed as a JSON
line (about ttl, 10 s, here): a measurement, not an assertion. The bounds
below only prove that nothing hangs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

from tests.conftest import require
from tests.support import wait_for

REPO = Path(__file__).resolve().parents[2]
HA = REPO / "ops" / "ha"
FAILOVER_WITHIN_S = 60   # liveness bounds, never timing claims
COMMAND_WITHIN_S = 300


def ha(*args: str) -> str:
    done = subprocess.run([str(HA), *args], capture_output=True, text=True,
                          timeout=COMMAND_WITHIN_S)
    assert done.returncode == 0, f"ops/ha {' '.join(args)} failed:\n{done.stderr[-4000:]}"
    return done.stdout


@dataclass
class Cluster:
    dir: Path
    dsn: str
    env: dict[str, str]

    def port(self, node: str) -> int:
        return int(self.env[f"HA_{node.upper()}_PORT"])

    def node_dsn(self, node: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port(node)}/postgres"

    def status(self) -> dict[str, tuple[str, str]]:
        """{name: (role, state)} from `ops/ha status`."""
        rows = {}
        for line in ha("status", str(self.dir)).splitlines():
            name, role, state, address, _lag = line.split()
            assert address == f"127.0.0.1:{self.port(name)}", line
            rows[name] = (role, state)
        return rows

    def processes(self) -> list[str]:
        """Every process of the cluster, read from the process table: its
        directory in the command line or the environment (etcd, Patroni, the
        postmasters), or the cluster's name in the title (postgres children)."""
        mark = str(self.dir).encode()
        title = f"postgres: {self.env['HA_SCOPE']}:".encode()
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes()
                environ = (proc / "environ").read_bytes()
            except OSError:
                continue
            if (mark in cmdline or b"PG_SHELL_HA_DIR=" + mark + b"\0" in environ
                    or cmdline.startswith(title)):
                args = cmdline.replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{proc.name} {args}")
        return found


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    require(bool(shutil.which("patroni")) and bool(shutil.which("etcd"))
            and Path("/usr/lib/postgresql/15/bin/postgres").exists(),
            "Patroni, etcd and PostgreSQL 15 (ops/install-packages test)")
    # Under /tmp, not pytest's tmp_path: the postgres user must reach it (pytest's is 0700 root's).
    root = Path(tempfile.mkdtemp(prefix="pg_shell-ha."))
    try:
        dsn = ha("start", str(root)).strip().splitlines()[-1]
        env = {}
        for line in (root / "ha.env").read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                key, _, value = line.partition("=")
                env[key] = value.strip("'")
        yield Cluster(root, dsn, env)
    finally:
        subprocess.run([str(HA), "stop", str(root)], capture_output=True, timeout=COMMAND_WITHIN_S)
        shutil.rmtree(root, ignore_errors=True)


def write(dsn: str, row: int, note: str) -> int:
    """Inserts a row through DSN; the port of the server that took it."""
    conn = psycopg2.connect(dsn, connect_timeout=3)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("INSERT INTO ha_smoke VALUES (%s, %s)", (row, note))
        # A commit that stopped waiting for the synchronous standby is only local: not a success.
        assert not [n for n in conn.notices if "synchronous replication" in n], conn.notices
        return conn.info.port
    finally:
        conn.close()


def rows(dsn: str) -> list[int]:
    conn = psycopg2.connect(dsn, connect_timeout=3)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM ha_smoke ORDER BY id")
            return [r[0] for r in cur.fetchall()]
    finally:
        conn.close()


def test_the_primary_crashes_and_the_replica_takes_over(cluster: Cluster) -> None:
    conn = psycopg2.connect(cluster.dsn, connect_timeout=3)
    with conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE ha_smoke (id int PRIMARY KEY, note text)")
    conn.close()
    leader = ha("primary", str(cluster.dir)).strip()
    assert write(cluster.dsn, 1, "before the crash") == cluster.port(leader)
    other = {"pg1": "pg2", "pg2": "pg1"}[leader]
    assert cluster.status() == {leader: ("leader", "running"),
                                other: ("sync_standby", "streaming")}

    ha("kill", str(cluster.dir), leader)
    killed = time.monotonic()
    seen: list[str] = []
    attempts = 0
    while True:
        attempts += 1
        try:
            port = write(cluster.dsn, 2, "after the crash")
            written = time.monotonic()
            break
        except psycopg2.Error as exc:
            message = " ".join(str(exc).split())[:400]
            if not seen or seen[-1] != message:
                seen.append(message)
        if time.monotonic() - killed > FAILOVER_WITHIN_S:
            status = subprocess.run([str(HA), "status", str(cluster.dir)], capture_output=True,
                                    text=True, timeout=60)
            raise AssertionError(
                f"no write through {cluster.dsn} within {FAILOVER_WITHIN_S} s of killing "
                f"{leader} ({attempts} attempts); errors seen, in order: {seen}; "
                f"ops/ha status: {status.stdout}{status.stderr[-2000:]}")
        time.sleep(0.2)
    print(json.dumps({"ha_failover_s": round(written - killed, 2), "attempts": attempts,
                      "killed": leader, "new_leader": other, "errors_seen": seen}))

    assert port == cluster.port(other)
    assert rows(cluster.dsn) == [1, 2]   # the row committed before the crash survived it
    assert ha("primary", str(cluster.dir)).strip() == other
    assert cluster.status()[leader][1] == "down"

    ha("rejoin", str(cluster.dir), leader)
    assert cluster.status() == {other: ("leader", "running"),
                                leader: ("sync_standby", "streaming")}
    assert write(cluster.dsn, 3, "after the rejoin") == cluster.port(other)
    wait_for("the write on the new primary on the rejoined replica",
             lambda: rows(cluster.node_dsn(leader)) == [1, 2, 3], timeout=30, every=0.2)
    conn = psycopg2.connect(cluster.node_dsn(leader), connect_timeout=3)
    with conn.cursor() as cur:
        cur.execute("SELECT pg_is_in_recovery()")
        assert cur.fetchone() == (True,)
    conn.close()

    assert cluster.processes(), "the process table shows no process of a running cluster"
    ha("stop", str(cluster.dir))
    left = cluster.processes()
    assert not left, f"left behind by ops/ha stop: {left}"
