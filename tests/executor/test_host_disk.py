"""A hostile tenant against an executor host's disk, through the tenant's SQL
API and the real daemon and engine: archiving a session removes its copy
(also when no executor was listening: the next executor to start, or the
cleanup agent, removes it), a create → run → archive loop keeps
the host's copies bounded, one user's copies per host are bounded (the
least recently used one goes, and its files come back from the database),
no image is made below the free-space floor (the command fails with a
reason), what a session deletes goes back to the host while the quota
still ends at its size, and one tenant cannot hold the warm pool. Each
fails on 791adb8."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.executor.conftest import Shell
from tests.fixtures_stack import REPO, Daemon
from tests.support import connect_as, one, wait_for

MiB = 1024 * 1024
PER_USER = 8  # PG_SHELL_VOLUMES_PER_USER's default
WARM_PER_USER = 4  # PG_SHELL_WARM_PER_USER's default
LIVENESS = 60  # seconds: only proves that something did not hang


def copies(daemon: Daemon) -> set[str]:
    """Sessions with an image in the executor's volumes directory."""
    found = Path(daemon.env["PG_SHELL_VOLUMES_DIR"]).glob("pg-shell-home-*.ext4")
    return {p.name[len("pg-shell-home-"):-len(".ext4")] for p in found}


def image_of(daemon: Daemon, session_id: str) -> Path:
    return Path(daemon.env["PG_SHELL_VOLUMES_DIR"]) / f"pg-shell-home-{session_id}.ext4"


def archive(shell: Shell, session_id: str | None = None) -> None:
    one(shell.conn, "SELECT shell_api.archive_session(%s)", (session_id or shell.session_id,))


def loops_of(image: Path) -> list[str]:
    out = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def new_session(shell: Shell) -> str:
    shell.session_id = one(shell.conn, "SELECT shell_api.create_session('more')")
    return str(shell.session_id)


def test_archiving_a_session_removes_its_copy_on_the_host(
        make_daemon: Callable[..., Daemon], shell: Shell, docker_client: Any) -> None:
    daemon = make_daemon().start()
    assert shell.run("echo kept > f")["status"] == "done"
    image = image_of(daemon, shell.session_id)
    assert image.exists()
    archive(shell)
    wait_for("the archived session's copy removed", lambda: not image.exists(), LIVENESS)
    assert not loops_of(image)
    volumes = docker_client.volumes.list(filters={"name": f"pg-shell-home-{shell.session_id}"})
    assert volumes == []
    # Its files were in the database all along: a fork of its last command has them.
    last = one(shell.conn, "SELECT max(id) FROM shell.commands WHERE session_id = %s",
               (shell.session_id,))
    shell.session_id = one(shell.conn, "SELECT shell_api.fork_session(%s)", (last,))
    assert shell.run("cat f")["output"] == "kept\n"


def test_a_copy_archived_while_no_executor_ran_is_removed_when_one_starts(
        make_daemon: Callable[..., Daemon], shell: Shell) -> None:
    before = make_daemon().start()
    assert shell.run("true")["status"] == "done"
    image = image_of(before, shell.session_id)
    before.stop()
    archive(shell)  # nobody listens: the notice is lost
    assert image.exists()
    make_daemon().start()
    wait_for("the copy removed at start-up", lambda: not image.exists(), LIVENESS)


def test_the_cleanup_agent_removes_a_copy_archived_while_no_executor_ran(
        make_daemon: Callable[..., Daemon], shell: Shell, tmp_path: Path) -> None:
    daemon = make_daemon().start()
    assert shell.run("true")["status"] == "done"
    image = image_of(daemon, shell.session_id)
    daemon.stop()
    archive(shell)
    env = {**daemon.env, "PG_SHELL_SIGNING_KEY_FILE": str(tmp_path / "cleanup-key")}
    done = subprocess.run([sys.executable, "-m", "executor.cli.main", "cleanup", "--once"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not image.exists()


def test_a_create_run_archive_loop_does_not_grow_the_hosts_copies(
        make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell], db: str) -> None:
    daemon = make_daemon().start()
    shell = make_shell("looper")
    admin = connect_as(db, "shell_admin")
    one(admin, "SELECT count(*) FROM shell.set_user_quota('looper', p_max_sessions => 3)")
    archive(shell)
    seen = []
    for _ in range(12):
        new_session(shell)
        assert shell.run("true")["status"] == "done"
        archive(shell)
        seen.append(len(copies(daemon)))
    assert max(seen) <= PER_USER, seen
    wait_for("every archived session's copy removed", lambda: not copies(daemon), LIVENESS)


def test_one_users_copies_on_a_host_are_bounded_and_an_evicted_one_comes_back(
        make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell]) -> None:
    daemon = make_daemon().start()
    bob = make_shell("bob")
    assert bob.run("echo bob > f")["status"] == "done"
    alice = make_shell("alice")
    sessions = [alice.session_id] + [new_session(alice) for _ in range(PER_USER + 2)]
    seen = []
    for n, session_id in enumerate(sessions):
        alice.session_id = session_id
        assert alice.run(f"echo {n} > f")["status"] == "done"
        seen.append(len(copies(daemon) & set(sessions)))
    assert max(seen) <= PER_USER, seen
    evicted = [s for s in sessions if s not in copies(daemon)]
    assert evicted
    assert bob.session_id in copies(daemon)  # another user's copy is not taken
    alice.session_id = evicted[0]
    row = alice.run("cat f")
    assert (row["status"], row["output"]) == ("done", f"{sessions.index(evicted[0])}\n")
    assert bob.run("cat f")["output"] == "bob\n"


def test_no_image_is_made_below_the_free_space_floor(
        make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell]) -> None:
    first = make_daemon().start()
    kept = make_shell("alice")
    assert kept.run("echo kept > f")["status"] == "done"
    first.stop()
    volumes = first.env["PG_SHELL_VOLUMES_DIR"]
    floor_mb = shutil.disk_usage(volumes).free // MiB + 1024  # above what the disk has
    daemon = make_daemon(PG_SHELL_MIN_FREE_MB=str(floor_mb)).start()
    spare = Path(volumes) / ".spare.ext4"
    spare.unlink(missing_ok=True)
    # A session this host already holds runs as before.
    assert kept.run("cat f")["output"] == "kept\n"
    newcomer = make_shell("bob")
    row = newcomer.run("echo hello")
    assert row["status"] == "failed"
    assert "low on disk space" in row["reason"] and "PG_SHELL_MIN_FREE_MB" in row["reason"]
    assert newcomer.session_id not in copies(daemon)
    assert not spare.exists()


def test_what_a_session_deletes_goes_back_to_the_host_and_the_quota_holds(
        make_daemon: Callable[..., Daemon], shell: Shell) -> None:
    daemon = make_daemon().start()  # 64 MiB homes (executor_env)
    image = image_of(daemon, shell.session_id)
    row = shell.run("head -c 40M /dev/urandom > a; head -c 40M /dev/urandom > b; echo $?")
    assert "No space left on device" in row["output"]

    def on_host() -> int:
        return os.stat(image).st_blocks * 512

    assert on_host() > 40 * MiB
    # Given back when the deletion is committed while the home is mounted
    # (every 5 s, or on sync); a deletion still pending when the last
    # container lets go of the volume keeps its blocks in the image, where
    # the next writes reuse them.
    assert shell.run("rm a b; sleep 7")["status"] == "done"
    wait_for("the deleted blocks given back", lambda: on_host() < 20 * MiB, LIVENESS)


def test_one_tenant_cannot_hold_the_warm_pool(
        make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell],
        docker_client: Any) -> None:
    daemon = make_daemon().start()
    alice = make_shell("alice")
    mine = [alice.session_id] + [new_session(alice) for _ in range(3)]
    for session_id in mine:
        alice.session_id = session_id
        assert alice.run("true")["status"] == "done"

    def warm_of(sessions: list[str]) -> int:
        labels = ["pg-shell.warm=1", f"pg-shell.worker-id={daemon.env['PG_SHELL_WORKER_ID']}"]
        held = docker_client.containers.list(all=True, sparse=True, filters={"label": labels})
        return sum(1 for c in held if c.attrs["Labels"].get("pg-shell.session-id") in sessions)

    wait_for("alice's warm containers", lambda: warm_of(mine) >= WARM_PER_USER)
    seen = []
    for _ in range(20):
        seen.append(warm_of(mine))
        time.sleep(0.1)
    assert max(seen) == WARM_PER_USER, seen
    bob = make_shell("bob")
    assert bob.run("true")["status"] == "done"
    wait_for("bob's warm container", lambda: warm_of([bob.session_id]) >= 1)
