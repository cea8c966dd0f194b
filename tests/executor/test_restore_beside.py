"""A command with no warm container starts its own while its files are
restored (against the real daemon, engine and database): when the restore
fails, that container is removed with the restore's, and nothing of the
command is left on the engine."""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Callable
from typing import Any

import psycopg2

from tests.executor.conftest import Shell
from tests.fixtures_stack import Daemon
from tests.support import call, one

UPLOADED = b"uploaded bytes\n"


def labels(row: dict[str, Any]) -> list[str]:
    """The labels of the command's containers (a command id alone is not
    unique: other tests' databases count from 1 too)."""
    return [f"pg-shell.command-id={row['id']}", f"pg-shell.session-id={row['session_id']}"]


def created_for(docker_client: Any, row: dict[str, Any], since: datetime.datetime) -> list[str]:
    """Ids of the containers made for the command since ``since``."""
    events = docker_client.events(
        since=since, until=datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1),
        filters={"type": "container", "event": "create", "label": labels(row)}, decode=True)
    return [event["id"] for event in events]


def test_a_failed_restore_leaves_no_container_of_the_command(
        db: str, make_daemon: Callable[..., Daemon], make_shell: Callable[[str], Shell],
        docker_client: Any) -> None:
    make_daemon(PG_SHELL_WARM_MAX="0").start()  # every command starts its own container
    shell = make_shell("alice")
    assert shell.run("echo here > f")["status"] == "done"
    # The upload is in the database only: the next command restores it.
    one(shell.conn, "SELECT shell_api.upload_file(%s, 'data.txt', %s, 420)",
        (shell.session_id, UPLOADED))
    attacker = psycopg2.connect(db)
    attacker.autocommit = True
    try:
        call(attacker, "UPDATE shell.blob_chunks SET data = %s WHERE sha256 = %s",
             (b"UPLOADED BYTES\n", hashlib.sha256(UPLOADED).hexdigest()))
        since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
        row = shell.run("cat data.txt")
        assert (row["status"], row["output"]) == ("failed", ""), row
        assert "could not be restored" in row["reason"], row["reason"]
    finally:
        attacker.close()
    # Three containers were made for it: two restores (the update of the
    # copy, then its rebuild from nothing) and, beside them, its own. All
    # are gone.
    assert len(created_for(docker_client, row, since)) == 3
    assert docker_client.api.containers(all=True, filters={"label": labels(row)}) == []
    shell.conn.close()
