"""Container runtimes: a user an administrator put on runsc runs every
command on gVisor's kernel, warm or cold; the runtime is recorded on the
command and vouched for by its signed record; a runtime the engine lacks
fails the command saying so, and stops an executor at start-up by name."""

from __future__ import annotations

import os

import pytest

from tests.audit.conftest import cli, verify
from tests.conftest import require
from tests.support import FORK_UNTIL_REFUSED, connect_as

# gVisor's kernel calls itself 4.4.0, which is not this host's.
GVISOR = "kernel=4.4.0"
PROBE = "echo kernel=$(uname -r)"


@pytest.fixture
def runsc(docker_client) -> str:
    require("runsc" in (docker_client.info().get("Runtimes") or {}),
            "the runsc runtime registered with the engine (ops/gvisor)")
    return "runsc"


def put_on(db: str, username: str, runtime: str) -> None:
    done = cli(db, "user", "runtime", username, runtime)
    assert done.returncode == 0, done.stderr


def test_a_user_on_runsc_runs_on_gvisor_warm_or_cold_and_the_record_says_so(
        db, runsc, daemon, make_shell):
    gvisor, host = make_shell("gina"), make_shell("hugo")
    put_on(db, "gina", runsc)
    cold = gvisor.run(PROBE)
    warm = gvisor.run(PROBE)  # after a completion: the session's warm container
    for row in (cold, warm):
        assert row["status"] == "done", row["output"]
        assert row["output"] == GVISOR + "\n", row["output"]
        assert row["runtime"] == "runsc"
    other = host.run(PROBE)
    assert other["output"] == f"kernel={os.uname().release}\n" and other["runtime"] == "runc"
    assert '"runtime":"runsc"' in warm["result_record"] and '"v":7' in warm["result_record"]
    assert '"runtime":"runc"' in other["result_record"]
    # Back to the executor's default: the next command (its warm container
    # was started under runsc) runs on the host's kernel.
    put_on(db, "gina", "default")
    back = gvisor.run(PROBE)
    assert back["output"] == f"kernel={os.uname().release}\n" and back["runtime"] == "runc"
    code, report = verify(db)
    assert code == 0 and report["breaks"] == [], report


def test_a_changed_runtime_in_a_record_is_an_edit(db, runsc, daemon, shell):
    put_on(db, "alice", runsc)
    row = shell.run("true")
    admin = connect_as(db, "postgres")
    try:
        with admin.cursor() as cur:
            cur.execute("UPDATE shell.commands SET runtime = 'runc' WHERE id = %s", (row["id"],))
        admin.commit()
    finally:
        admin.close()
    code, report = verify(db)
    assert code == 1 and [b["field"] for b in report["breaks"]] == ["runtime"], report


def test_a_runtime_the_engine_lacks_fails_the_command_and_names_it(db, daemon, shell):
    put_on(db, "alice", "kata")
    row = shell.run("echo never")
    assert (row["status"], row["runtime"]) == ("failed", None)
    assert row["reason"].startswith("runtime kata is not available on this host (it has "), row
    assert "never" not in row["output"]


def test_an_unknown_runtime_stops_the_executor_at_start_up(make_daemon):
    executor = make_daemon(PG_SHELL_RUNTIME="kata").launch()
    assert executor.wait(60) != 0
    assert "PG_SHELL_RUNTIME=kata: the Docker engine has no runtime kata" in executor.log()


def test_runtime_names_are_checked(db, shell):
    bad = cli(db, "user", "runtime", "alice", "Not A Name")
    assert bad.returncode != 0 and "not a runtime name: Not A Name [22023]" in bad.stderr
    nobody = cli(db, "user", "runtime", "nobody", "runsc")
    assert nobody.returncode != 0 and "no user nobody [22023]" in nobody.stderr


def test_on_gvisor_a_tenant_starts_as_many_processes_as_its_limit_and_no_more(
        db, runsc, make_daemon, shell):
    # gVisor's kernel counts them (RLIMIT_NPROC); the host's pids limit is
    # sized for its threads, which once ran out at ten processes and took
    # the sandbox down with the command.
    make_daemon(PG_SHELL_PIDS="48").start()
    put_on(db, "alice", runsc)
    row = shell.run(FORK_UNTIL_REFUSED)
    assert (row["status"], row["runtime"]) == ("done", "runsc"), row["output"]
    word, errno, started = row["output"].split()
    assert (word, errno) == ("refused", "11"), row["output"]  # EAGAIN
    # 48, less the supervisor, the shell and python itself.
    assert 40 <= int(started) <= 45, row["output"]
