"""The cleanup daemon outlives a PostgreSQL restart and then does its work,
on a throwaway cluster of its own; `--once` fails loudly when it cannot."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.db import migrations
from executor.db.connection import connect, query
from tests.audit.conftest import cli
from tests.conftest import require
from tests.executor.conftest import REPO
from tests.support import create_user, one, tenant

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.data = root / "data"
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def _pg(self, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True,
                       timeout=120)

    def init(self) -> None:
        self._pg(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")

    def start(self) -> None:
        self._pg(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-w",
                 "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1", "start")

    def stop(self) -> None:
        self._pg(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    require((PG_BIN / "initdb").exists() and shutil.which("runuser") is not None,
            "PostgreSQL 15 server binaries (initdb, pg_ctl)")
    root = Path(tempfile.mkdtemp(prefix="pgtest-cluster-", dir="/var/tmp"))
    shutil.chown(root, "postgres", "postgres")
    c = Cluster(root, _free_port())
    try:
        c.init()
        c.start()
        yield c
    finally:
        try:
            c.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(root, ignore_errors=True)


def _old_cancelled_commands(dsn: str, count: int) -> tuple[str, list[int]]:
    uid = create_user(dsn, "carol")
    me = tenant(dsn, uid)
    session = str(one(me, "SELECT shell_api.create_session('old')"))
    ids = [one(me, "SELECT shell_api.submit_command(%s, %s)", (session, f"echo {i}"))
           for i in range(count)]
    for cid in ids:
        one(me, "SELECT shell_api.cancel_command(%s)", (cid,))
    me.close()
    su = connect(dsn)
    query(su, "UPDATE shell.commands SET completed_at = now() - interval '400 days'")
    su.close()
    return session, ids


def _remaining(dsn: str) -> int:
    conn = connect(dsn)
    try:
        return query(conn, "SELECT count(*) AS n FROM shell.commands")[0]["n"]
    finally:
        conn.close()


def test_the_cleanup_daemon_outlives_a_postgresql_restart_then_removes_old_history(cluster,
                                                                                   tmp_path):
    conn = connect(cluster.dsn)
    migrations.migrate(conn)
    conn.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    env.update({"DATABASE_URL": cluster.dsn, "PG_SHELL_CLEANUP_INTERVAL_S": "1",
                "PG_SHELL_RETENTION_BATCH": "7",
                "PG_SHELL_SIGNING_KEY_FILE": str(tmp_path / "key")})
    log_path = tmp_path / "cleanup.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "executor.cli.main", "cleanup",
                                 "--no-volumes"],
                                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)

    def wait_for(predicate, what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert proc.poll() is None, (
                f"cleanup exited {proc.returncode}:\n{log_path.read_text()[-4000:]}")
            assert time.monotonic() < deadline, f"{what}:\n{log_path.read_text()[-4000:]}"
            time.sleep(0.2)

    try:
        wait_for(lambda: "cleanup round" in log_path.read_text(), "no first round")
        cluster.stop()
        wait_for(lambda: "waits for PostgreSQL" in log_path.read_text(),
                 "the outage went unnoticed")
        time.sleep(2)
        cluster.start()
        session, ids = _old_cancelled_commands(cluster.dsn, 20)
        wait_for(lambda: _remaining(cluster.dsn) == 0, "old history was not removed")
        assert proc.poll() is None
        conn = connect(cluster.dsn)
        checkpoint = query(conn, "SELECT chain_seq, removed FROM shell.chain_checkpoints "
                                 "WHERE session_id = %s",
                           (session,))
        conn.close()
        assert [(c["chain_seq"], c["removed"]) for c in checkpoint] == [(20, 20)]
        verified = cli(cluster.dsn, "audit", "verify")
        assert (verified.returncode, verified.stdout.strip()) == (
            0, "intact: 0 links in 1 sessions"), verified
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cleanup_once_exits_non_zero_when_postgresql_is_unreachable(tmp_path):
    done = cli(f"postgresql://postgres@127.0.0.1:{_free_port()}/postgres", "cleanup", "--once",
               "--no-volumes", env={"PG_SHELL_SIGNING_KEY_FILE": str(tmp_path / "key")})
    assert done.returncode == 1
    assert "pg-shell:" in done.stderr
