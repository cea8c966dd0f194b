"""Retention: `pg-shell cleanup` removes only old ended commands, keeps what
forks and replays refer to, leaves a signed checkpoint, and the history still
verifies afterwards."""

from __future__ import annotations

import json

from tests.audit.conftest import cli, verify
from tests.support import one, tenant


def cleanup_once(dsn: str, tmp_path, *extra: str):
    return cli(dsn, "cleanup", "--once", "--no-volumes", *extra,
               env={"PG_SHELL_SIGNING_KEY_FILE": str(tmp_path / "cleanup-key")})


def test_retention_removes_only_old_ended_commands_and_the_chain_still_verifies(copy, sql, history,
                                                                                tmp_path):
    alice, ids = history.sessions["alice"], history.ids
    old = [ids["cancelled"], ids["hello"], ids["state"], ids["false"]]  # chain_seq 1..4
    sql("UPDATE shell.commands SET completed_at = now() - interval '100 days' WHERE id = ANY (%s)",
        (old,))
    # A fork of an old command keeps it; a queued command is never touched.
    me = tenant(copy, history.users["alice"])
    fork = one(me, "SELECT shell_api.fork_session(%s)", (ids["hello"],))
    queued = one(me, "SELECT shell_api.submit_command(%s, 'echo queued')", (alice,))
    me.close()
    sql("UPDATE shell.commands SET submitted_at = now() - interval '200 days' WHERE id = %s",
        (queued,))
    bob = tenant(copy, history.users["bob"])
    running = one(bob, "SELECT shell_api.submit_command(%s, 'sleep 1')", (history.sessions["bob"],))
    bob.close()
    sql("UPDATE shell.commands SET status = 'running', worker_id = 'w', claimed_at = now(), "
        "started_at = now(), lease_expires_at = now() + interval '1 hour', submitted_at = now() - "
        "interval '200 days' WHERE id = %s", (running,))

    done = cleanup_once(copy, tmp_path)
    assert done.returncode == 0, done.stderr
    left = {r["id"] for r in sql("SELECT id FROM shell.commands")}
    assert left == {ids["hello"], ids["nul"], ids["last"], queued, running, ids["bob"]}
    assert sql("SELECT count(*) AS n FROM shell.output_chunks WHERE command_id = ANY (%s)",
               (old,))[0]["n"] > 0
    assert sql("SELECT count(*) AS n FROM shell.output_chunks WHERE command_id IN (%s, %s)",
               (ids["state"], ids["false"]))[0]["n"] == 0
    checkpoint = sql("SELECT * FROM shell.chain_checkpoints WHERE session_id = %s", (alice,))[0]
    false_hash = history_hash(history, ids["false"])
    assert (checkpoint["chain_seq"], checkpoint["chain_hash"], checkpoint["removed"]) == (
        4, false_hash, 3)
    assert json.loads(checkpoint["record"])["signer"] == checkpoint["key_id"]
    code, report = verify(copy)
    assert (code, report["links"]) == (0, 4), report  # hello (kept), nul, last; bob

    # Once the fork no longer refers to it, the pinned command goes too.
    sql("UPDATE shell.sessions SET forked_from_command_id = NULL WHERE id = %s", (fork,))
    assert cleanup_once(copy, tmp_path).returncode == 0
    assert ids["hello"] not in {r["id"] for r in sql("SELECT id FROM shell.commands")}
    checkpoint = sql("SELECT * FROM shell.chain_checkpoints WHERE session_id = %s", (alice,))[0]
    assert (checkpoint["chain_seq"], checkpoint["removed"]) == (4, 4)
    assert verify(copy)[0] == 0
    # Re-running removes nothing more.
    again = cleanup_once(copy, tmp_path)
    assert again.returncode == 0 and "removed 0 commands" in again.stderr


def history_hash(history, command_id: int) -> str:
    import os

    from executor.db.connection import connect, query
    from tests.conftest import with_database

    conn = connect(with_database(os.environ["DATABASE_URL"], history.template))
    try:
        return query(conn, "SELECT chain_hash FROM shell.commands WHERE id = %s",
                     (command_id,))[0]["chain_hash"]
    finally:
        conn.close()


def test_a_forged_or_emptied_checkpoint_is_caught(copy, sql, history, tmp_path):
    ids = history.ids
    sql("UPDATE shell.commands SET completed_at = now() - interval '100 days' WHERE id = ANY (%s)",
        ([ids["cancelled"], ids["hello"]],))
    assert cleanup_once(copy, tmp_path).returncode == 0
    assert verify(copy)[0] == 0
    # Hiding more removed links behind the checkpoint breaks its signature.
    sql("UPDATE shell.chain_checkpoints SET chain_seq = 3, removed = 3, "
        "chain_hash = (SELECT chain_hash FROM shell.commands WHERE id = %s)", (ids["state"],))
    sql("DELETE FROM shell.output_chunks WHERE command_id = %s", (ids["state"],))
    sql("DELETE FROM shell.commands WHERE id = %s", (ids["state"],))
    code, report = verify(copy)
    assert (code, report["breaks"][0]["cause"]) == (1, "edited")
    assert report["breaks"][0]["field"] == "checkpoint"
