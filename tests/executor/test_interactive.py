"""Commands that take input (DESIGN.md §13), through the SQL API against the
real executor: a terminal, input given up front, echo-off input redacted,
the idle limit, and the errors a client meets."""

from __future__ import annotations

import json
import time

import psycopg2
import pytest

from tests.audit.conftest import verify
from tests.support import call, one

from .conftest import Shell


def submit_terminal(shell: Shell, command: str, cols: int = 80, rows: int = 24) -> int:
    return one(shell.conn, "SELECT shell_api.submit_command(%s, %s, p_tty => true, p_cols => %s, "
               "p_rows => %s)", (shell.session_id, command, cols, rows))


def send(shell: Shell, command_id: int, data: str) -> int:
    return one(shell.conn, "SELECT shell_api.send_input(%s, %s)", (command_id, data))


def wait_output(shell: Shell, command_id: int, text: str, timeout: float = 60) -> str:
    """The command's output once it holds ``text`` (a liveness bound, not a timing)."""
    row = shell.wait(command_id, timeout,
                     until=lambda r: text in (r["output"] or "") or r["status"] in
                     ("done", "failed", "cancelled"))
    assert text in row["output"], row["output"]
    return str(row["output"])


def test_a_terminal_command_reads_what_is_typed(daemon, shell):
    cid = submit_terminal(shell, 'stty size; read -p "name? " n; echo "hi $n"', cols=100, rows=30)
    wait_output(shell, cid, "name? ")
    send(shell, cid, "bob\r")
    row = shell.wait(cid)
    assert (row["status"], row["exit_code"]) == ("done", 0)
    assert "30 100" in row["output"] and "hi bob" in row["output"]
    assert call(shell.conn, "SELECT seq, data, redacted FROM shell_api.command_input(%s)",
                (cid,)) == [{"seq": 0, "data": "bob\r", "redacted": False}]


def test_a_python_repl_answers_and_survives_ctrl_c(daemon, shell):
    cid = submit_terminal(shell, "python3 -q")
    wait_output(shell, cid, ">>> ")
    send(shell, cid, "6*7\r")
    wait_output(shell, cid, "42")
    send(shell, cid, "import time; time.sleep(60)\r")
    time.sleep(0.5)  # the sleep has begun (or not: Ctrl-C then interrupts the prompt)
    send(shell, cid, "\x03")
    wait_output(shell, cid, "KeyboardInterrupt")
    send(shell, cid, "exit()\r")
    row = shell.wait(cid)
    assert (row["status"], row["exit_code"]) == ("done", 0)
    # readline turns echo off but echoes itself: what is typed there is kept
    typed = call(shell.conn, "SELECT data, redacted FROM shell_api.command_input(%s)", (cid,))
    assert typed[0] == {"data": "6*7\r", "redacted": False}


def test_a_password_typed_with_echo_off_is_never_stored(daemon, shell, db):
    cid = submit_terminal(shell, 'read -s -p "pw: " p; echo; echo "got ${#p}"')
    wait_output(shell, cid, "pw: ")
    send(shell, cid, "hunter2-secret\r")
    row = shell.wait(cid)
    assert "got 14" in row["output"] and "hunter2" not in row["output"]
    owner = psycopg2.connect(db)
    try:
        stored = call(owner, "SELECT data, redacted, length, sha256 FROM shell.command_input "
                      "WHERE command_id = %s", (cid,))
        secrets = call(owner, "SELECT count(*) AS n FROM shell.secret_input")
        dumped = call(owner, "SELECT count(*) AS n FROM shell.commands c WHERE c.id = %s AND "
                      "(c.result_record LIKE '%%hunter2%%' OR c.output LIKE '%%hunter2%%')", (cid,))
    finally:
        owner.close()
    assert stored[0]["data"] is None and stored[0]["redacted"] and stored[0]["length"] == 15
    assert secrets == [{"n": 0}] and dumped == [{"n": 0}]
    assert call(shell.conn, "SELECT data, redacted FROM shell_api.command_input(%s)",
                (cid,)) == [{"data": None, "redacted": True}]


def test_resize_changes_the_window_size(daemon, shell):
    cid = submit_terminal(shell, 'stty size; read -p "go? " x; stty size', cols=80, rows=24)
    wait_output(shell, cid, "go? ")
    one(shell.conn, "SELECT shell_api.resize_terminal(%s, 132, 43) IS NULL", (cid,))
    send(shell, cid, "\r")
    row = shell.wait(cid)
    assert "24 80" in row["output"] and "43 132" in row["output"]


def test_input_given_up_front_is_all_of_stdin(daemon, shell):
    cid = one(shell.conn, "SELECT shell_api.submit_command(%s, 'wc -l', p_stdin => %s)",
              (shell.session_id, "a\nb\nc\n"))
    row = shell.wait(cid)
    assert (row["status"], row["output"].strip()) == ("done", "3")


def test_a_forgotten_repl_ends_at_the_idle_limit(daemon, shell, db):
    owner = psycopg2.connect(db)
    owner.autocommit = True
    try:
        call(owner, "SELECT * FROM shell.set_user_quota('alice', p_terminal_idle_s => 2)")
    finally:
        owner.close()
    cid = submit_terminal(shell, "cat")
    row = shell.wait(cid)
    assert (row["status"], row["reason"], row["exit_code"]) == ("failed", "idle", 124)


def test_input_errors_say_what_to_do(daemon, shell, make_shell):
    plain = shell.run("true")["id"]
    with pytest.raises(psycopg2.Error) as ended:
        send(shell, plain, "x")
    assert ended.value.pgcode == "PT409"
    shell.conn.rollback()
    cid = shell.submit("sleep 30")
    with pytest.raises(psycopg2.Error) as no_input:
        send(shell, cid, "x")
    assert no_input.value.pgcode == "PT409" and "p_tty" in no_input.value.diag.message_hint
    shell.conn.rollback()
    shell.cancel(cid)
    term = submit_terminal(shell, "cat")
    for data, code in (("x" * 65537, "22023"), ("", "22023")):
        with pytest.raises(psycopg2.Error) as bad:
            send(shell, term, data)
        assert bad.value.pgcode == code
        shell.conn.rollback()
    with pytest.raises(psycopg2.Error) as size:
        one(shell.conn, "SELECT shell_api.resize_terminal(%s, 0, 24)", (term,))
    assert size.value.pgcode == "22023"
    shell.conn.rollback()
    other = make_shell("mallory")
    with pytest.raises(psycopg2.Error) as foreign:
        send(other, term, "x")
    assert (foreign.value.pgcode, foreign.value.diag.message_primary) == ("22023",
                                                                          "command not found")
    other.conn.rollback()
    one(shell.conn, "SELECT shell_api.close_input(%s)", (term,))
    row = shell.wait(term)
    assert (row["status"], row["exit_code"]) == ("done", 0)


def test_the_signed_record_vouches_for_the_input(daemon, shell, db):
    cid = submit_terminal(shell, 'read -p "? " a; read -s -p "pw: " b; echo "$a ${#b}"')
    wait_output(shell, cid, "? ")
    send(shell, cid, "typed\r")
    wait_output(shell, cid, "pw: ")
    send(shell, cid, "secret\r")
    assert "typed 6" in shell.wait(cid)["output"]
    code, report = verify(db)
    assert (code, report["intact"]) == (0, True), report
    owner = psycopg2.connect(db)
    owner.autocommit = True
    try:
        record = json.loads(one(owner, "SELECT result_record FROM shell.commands WHERE id = %s",
                                (cid,)))
        assert record["v"] >= 5 and len(record["input_sha256"]) == 64  # a version with it
        call(owner, "UPDATE shell.command_input SET data = 'other\r' WHERE command_id = %s "
             "AND seq = 0", (cid,))
        code, report = verify(db)
        assert (code, report["breaks"][0]["field"]) == (1, "input"), report
        call(owner, "UPDATE shell.command_input SET data = 'typed\r', offset_ms = offset_ms + 1 "
             "WHERE command_id = %s AND seq = 0", (cid,))
        code, report = verify(db)
        assert (code, report["breaks"][0]["field"]) == (1, "input"), report
    finally:
        owner.close()


def test_a_replay_types_the_recorded_input_again(daemon, shell):
    cid = submit_terminal(shell, 'read -p "name? " n; echo "hi $n" > greeting; cat greeting')
    wait_output(shell, cid, "name? ")
    send(shell, cid, "ada\r")
    assert "hi ada" in shell.wait(cid)["output"]
    run_id = one(shell.conn, "SELECT shell_api.replay_session(%s, %s)", (shell.session_id, cid))
    replayed = one(shell.conn, "SELECT id FROM shell.commands WHERE session_id = %s", (run_id,))
    row = shell.wait(replayed)
    assert (row["status"], row["tty"]) == ("done", True) and "hi ada" in row["output"]
    assert call(shell.conn, "SELECT data FROM shell_api.command_input(%s)",
                (replayed,)) == [{"data": "ada\r"}]


def test_a_replay_that_would_need_a_password_is_refused(daemon, shell):
    cid = submit_terminal(shell, 'read -s -p "pw: " p')
    wait_output(shell, cid, "pw: ")
    send(shell, cid, "secret\r")
    shell.wait(cid)
    with pytest.raises(psycopg2.Error) as refused:
        one(shell.conn, "SELECT shell_api.replay_session(%s, %s)", (shell.session_id, cid))
    assert refused.value.pgcode == "PT409" and str(cid) in refused.value.diag.message_primary
