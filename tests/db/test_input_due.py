"""When input is due (0041): pending_input says how long each row has yet
to wait, on the clock that stamped it. Live input is due at once however
long ago the command started; a replay's recorded input waits out the rest
of its offset."""

from __future__ import annotations

from tests.db.claim_support import Worker, new_tenant, superuser
from tests.support import call, one


def test_live_input_is_due_at_once_and_recorded_input_at_its_offset(db: str) -> None:
    alice = new_tenant(db, "alice")
    session = alice.session()
    cid = one(alice.conn, "SELECT shell_api.submit_command(%s, 'cat', p_tty => true)", (session,))
    worker = Worker(db, "w1")
    [claimed] = worker.claim()
    worker.start(claimed)
    admin = superuser(db)
    # Started a minute ago: a key typed now is stamped 60 s into the command.
    call(admin, "UPDATE shell.commands SET started_at = started_at - interval '60 seconds' "
                "WHERE id = %s", (cid,))
    call(alice.conn, "SELECT shell_api.send_input(%s, 'typed')", (cid,))
    # As a replay's input recorded 10 minutes into its original.
    call(admin, "INSERT INTO shell.command_input (command_id, seq, offset_ms, kind, data, length,"
                " sha256) VALUES (%s, 1, 600000, 'data', 'later', 5,"
                " encode(sha256('later'), 'hex'))", (cid,))
    rows = call(worker.conn, "SELECT seq, due_in_ms, data FROM shell.pending_input(%s, %s, %s, -1)",
                (cid, worker.id, claimed.attempt))
    assert [(r["seq"], r["data"]) for r in rows] == [(0, "typed"), (1, "later")]
    stamped = one(admin, "SELECT offset_ms FROM shell.command_input WHERE command_id = %s "
                         "AND seq = 0", (cid,))
    assert stamped >= 60000
    assert rows[0]["due_in_ms"] == 0
    assert 0 < rows[1]["due_in_ms"] <= 600000 - 60000


def test_what_a_command_runs_with_is_read_once_by_its_key(db: str) -> None:
    # Checked at every command's start: with other commands in the table it
    # must not look at them (a volatile lookup in a WHERE ran once per row).
    alice = new_tenant(db, "alice")
    session = alice.session()
    cid = one(alice.conn, "SELECT shell_api.submit_command(%s, 'cat', p_tty => true)", (session,))
    for _ in range(5):
        one(alice.conn, "SELECT shell_api.submit_command(%s, 'true')", (session,))
    worker = Worker(db, "w1")
    [claimed] = worker.claim()
    admin = superuser(db)
    with admin.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SET LOCAL track_functions = 'pl'")
        cur.execute("SELECT shell.command_terminal(%s, 'w1', %s)", (cid, claimed.attempt))
        assert cur.fetchone()[0]["tty"] is True
        cur.execute("SELECT calls FROM pg_stat_xact_user_functions"
                    " WHERE funcid = 'shell.held_command'::regproc")
        assert cur.fetchall() == [(1,)]
        cur.execute("ROLLBACK")
