"""Upgrading from an executor whose sandbox user was 1000:1000: an old
session's next command works with its files intact, whether its files are
in the database (the volume a cache of them) or its volume is their only
copy (a session from before the workspace). Through the real daemon and
PostgreSQL, on loop and plain volumes."""

from __future__ import annotations

import os
from collections.abc import Iterator

import docker.errors
import psycopg2
import pytest

from executor.sandbox.volumes import LoopVolumes, PlainVolumes, index_path, volume_name
from tests.conftest import require
from tests.engine_cleanup import remove_container
from tests.old_volume import CHECK, FILES, checked, host_target, make_old, untouched
from tests.support import call, one

MiB = 1024 * 1024


@pytest.fixture(params=["loop", "none"])
def quota(request) -> str:
    if request.param == "loop":
        require(os.geteuid() == 0, "root (loop-backed volumes need losetup and mkfs)")
    return str(request.param)


@pytest.fixture
def volumes(quota, executor_env, docker_client, shell) -> Iterator[LoopVolumes | PlainVolumes]:
    """The daemon's volumes, as this test sees them."""
    state_dir = executor_env["PG_SHELL_VOLUMES_DIR"]
    yield (LoopVolumes(docker_client, int(executor_env["PG_SHELL_DISK_QUOTA_MB"]) * MiB, state_dir)
           if quota == "loop" else PlainVolumes(docker_client, state_dir))
    if quota == "none":  # loop volumes go with their state directory (make_daemon)
        name = volume_name(shell.session_id)
        for container in docker_client.containers.list(all=True, sparse=True,
                                                       filters={"volume": name}):
            remove_container(docker_client, container)  # the executor may be removing it too
        try:
            docker_client.volumes.get(name).remove()
        except docker.errors.NotFound:
            pass


def stored(shell, path: str) -> bytes:
    return bytes(one(shell.conn, "SELECT shell_api.read_file(%s, %s)", (shell.session_id, path)))


def kinds(shell) -> dict[str, str]:
    """The kinds of the stored entries, but the dot files a plain volume is seeded with."""
    rows = call(shell.conn, "SELECT * FROM shell_api.session_files(%s)", (shell.session_id,))
    return {r["path"]: r["kind"] for r in rows if not r["path"].startswith(".")}


EXPECTED_KINDS = {"notes": "dir", "notes/todo.txt": "file", "private": "dir",
                  "private/key": "file", "passwd-link": "symlink", "host-link": "symlink",
                  "new": "file"}


@pytest.mark.parametrize("index", ["kept", "lost"])
def test_a_session_whose_files_are_stored_works_after_the_upgrade(
        quota, index, volumes, make_daemon, shell, docker_client, sandbox_image) -> None:
    """With the host's index kept the copy is used as it is; without it the
    copy is wiped and restored, which needs the old files deletable."""
    daemon = make_daemon(PG_SHELL_DISK_QUOTA=quota).start()
    with host_target("/var/tmp") as target:
        first = shell.run(FILES.format(host_target=target))
        assert first["status"] == "done", first["output"]
        # The old executor had left this host's copy owned by its user.
        daemon.stop()
        make_old(docker_client, volumes, shell.session_id, sandbox_image)
        if index == "lost":
            index_path(volumes.state_dir, shell.session_id).unlink()
        daemon.start()
        row = shell.run(CHECK)
        assert (row["status"], row["output"]) == ("done", checked(target))
        assert untouched(target)
    assert kinds(shell) == EXPECTED_KINDS
    assert (stored(shell, "notes/todo.txt"), stored(shell, "new")) == (b"todo\nmore\n", b"new\n")


def test_a_session_from_before_the_workspace_keeps_its_only_copy(
        quota, volumes, make_daemon, shell, db, docker_client, sandbox_image) -> None:
    with psycopg2.connect(db) as su, su.cursor() as cur:
        cur.execute("UPDATE shell.sessions SET root = NULL WHERE id = %s", (shell.session_id,))
    su.close()
    with host_target("/var/tmp") as target:
        make_old(docker_client, volumes, shell.session_id, sandbox_image,
                 FILES.format(host_target=target))
        make_daemon(PG_SHELL_DISK_QUOTA=quota).start()
        row = shell.run(CHECK)
        assert (row["status"], row["output"]) == ("done", checked(target))
        assert untouched(target)
    assert row["root_after"] is not None  # imported from the volume
    assert kinds(shell) == EXPECTED_KINDS
    assert (stored(shell, "notes/todo.txt"), stored(shell, "private/key")) == (b"todo\nmore\n",
                                                                              b"secret\n")
