"""Renaming and archiving sessions, their lineage in the list, and each
command's outcome in plain words (0015_sessions_page), with the identity
and tenant rules of every shell_api function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.db.api_helpers import WORKER, append, claim, run, start
from tests.db.claim_support import new_tenant, raises_sqlstate, superuser
from tests.support import call, connect_as, executor, one

REPO = Path(__file__).resolve().parents[2]


def listed(conn) -> dict[str, dict]:
    return {str(r["id"]): r for r in call(conn, "SELECT * FROM shell_api.list_sessions()")}


def fragment(conn, command_id: int) -> str:
    return str(one(conn, "SELECT shell.render_command(c) FROM shell.commands c WHERE c.id = %s",
                   (command_id,)))


def test_rename_changes_only_the_callers_session_and_refuses_blank_names(db):
    alice, mallory = new_tenant(db, "alice"), new_tenant(db, "mallory")
    session = alice.session("first")
    call(alice.conn, "SELECT shell_api.rename_session(%s, %s)", (session, "  build box  "))
    assert listed(alice.conn)[session]["name"] == "build box"
    with raises_sqlstate("22023", "session name must be 1 to 200 characters"):
        call(alice.conn, "SELECT shell_api.rename_session(%s, %s)", (session, "   "))
    alice.conn.rollback()
    # Another tenant's session and a made-up id get the same answer.
    with raises_sqlstate("22023", "session not found"):
        call(mallory.conn, "SELECT shell_api.rename_session(%s, 'pwned')", (session,))
    mallory.conn.rollback()
    with raises_sqlstate("22023", "session not found"):
        call(mallory.conn, "SELECT shell_api.rename_session(gen_random_uuid(), 'x')")
    mallory.conn.rollback()
    assert listed(alice.conn)[session]["name"] == "build box"


def test_archive_hides_the_session_frees_the_quota_and_keeps_its_history(db):
    alice, mallory = new_tenant(db, "alice"), new_tenant(db, "mallory")
    call(superuser(db), "UPDATE shell.users SET max_sessions = 2 WHERE id = %s", (alice.uid,))
    old, other = alice.session("old"), alice.session("other")
    cid = alice.submit(old, "echo kept")
    run(db, cid, "kept\n")
    with raises_sqlstate("PT429", "session quota reached"):
        alice.session("third")
    alice.conn.rollback()

    with raises_sqlstate("22023", "session not found"):
        call(mallory.conn, "SELECT shell_api.archive_session(%s)", (old,))
    mallory.conn.rollback()
    call(alice.conn, "SELECT shell_api.archive_session(%s)", (old,))
    assert set(listed(alice.conn)) == {other}
    third = alice.session("third")  # the archived session no longer counts
    assert set(listed(alice.conn)) == {other, third}

    # Nothing is deleted: the history and the files read back; the session
    # takes no more commands and cannot be archived or renamed again until
    # it is restored.
    rows = call(alice.conn, "SELECT * FROM shell_api.latest_output(%s)", (old,))
    assert [(r["command"], r["output"]) for r in rows] == [("echo kept", "kept\n")]
    assert call(alice.conn, "SELECT * FROM shell_api.session_files(%s)", (old,)) == []
    for sql in ("SELECT shell_api.submit_command(%s, 'ls')", "SELECT shell_api.archive_session(%s)",
                "SELECT shell_api.rename_session(%s, 'back')",
                "SELECT shell_api.replay_session(%s, NULL)"):
        with raises_sqlstate("PT409", "session is archived"):
            call(alice.conn, sql, (old,))
        alice.conn.rollback()
    call(alice.conn, "SELECT shell_api.warm_session(%s)", (old,))  # nothing to warm
    assert one(superuser(db), "SELECT warm_asked_at FROM shell.lanes WHERE session_id = %s",
               (old,)) is None

    # Restored only within the quota; then it runs commands again.
    with raises_sqlstate("PT429", "session quota reached (2 sessions)"):
        call(alice.conn, "SELECT shell_api.unarchive_session(%s)", (old,))
    alice.conn.rollback()
    call(alice.conn, "SELECT shell_api.archive_session(%s)", (third,))
    with raises_sqlstate("22023", "session not found"):
        call(mallory.conn, "SELECT shell_api.unarchive_session(%s)", (old,))
    mallory.conn.rollback()
    call(alice.conn, "SELECT shell_api.unarchive_session(%s)", (old,))
    call(alice.conn, "SELECT shell_api.unarchive_session(%s)", (old,))  # again: nothing to do
    assert set(listed(alice.conn)) == {other, old}
    alice.submit(old, "echo back")


def test_a_session_with_unfinished_commands_is_not_archived(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    alice.submit(session, "sleep 60")
    with raises_sqlstate("PT409", "session has unfinished commands"):
        call(alice.conn, "SELECT shell_api.archive_session(%s)", (session,))
    alice.conn.rollback()
    assert session in listed(alice.conn)


def test_anonymous_callers_and_other_roles_cannot_rename_or_archive(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    anon = connect_as(db, "shell_anon")
    for sql in ("SELECT shell_api.rename_session(%s, 'x')", "SELECT shell_api.archive_session(%s)"):
        with raises_sqlstate("42501"):
            call(anon, sql, (session,))
        anon.rollback()
    nobody = connect_as(db, "shell_user")  # the role without a JWT identity
    with raises_sqlstate("42501"):
        call(nobody, "SELECT shell_api.archive_session(%s)", (session,))


def test_the_list_names_where_forks_and_replays_came_from(db):
    alice = new_tenant(db, "alice")
    source = alice.session("source")
    cid = alice.submit(source, "cd /tmp")
    run(db, cid, cwd="/tmp")
    fork = str(one(alice.conn, "SELECT shell_api.fork_session(%s)", (cid,)))
    replay = str(one(alice.conn, "SELECT shell_api.replay_session(%s, %s)", (source, cid)))
    sessions = listed(alice.conn)
    assert (sessions[fork]["forked_from_session_id"], sessions[fork]["forked_from_command_id"]) == (
        source, cid)
    assert str(sessions[replay]["replay_of_session_id"]) == source
    assert sessions[source]["forked_from_session_id"] is None


def test_the_audit_chain_still_verifies_after_archiving(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    # A command cancelled before it ran is chained with a record the
    # database vouches for (a signed one needs a real executor: the browser
    # test archives a session whose commands ran).
    assert alice.cancel(alice.submit(session, "echo one"))
    call(alice.conn, "SELECT shell_api.archive_session(%s)", (session,))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    env["DATABASE_URL"] = db
    done = subprocess.run([sys.executable, "-m", "executor.cli.main", "audit", "verify", "--json"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["intact"], report["links"], report["breaks"]) == (True, 1, [])


def test_outcomes_read_in_plain_words_with_a_colour_class(db):
    alice = new_tenant(db, "alice")
    call(executor(db), "SELECT shell.publish_time_limit(30)")
    session = alice.session()
    ok, missing = alice.submit(session, "true"), alice.submit(session, "nope")
    run(db, ok)
    run(db, missing, exit_code=127)
    assert 'data-outcome="ok"' in fragment(alice.conn, ok)
    assert fragment(alice.conn, ok).endswith(
        '<div class="meta">done · exit 0 · 12 ms</div></article>')
    failed = fragment(alice.conn, missing)
    assert 'data-outcome="failed"' in failed
    assert '<div class="meta">exit 127: command not found · 12 ms</div>' in failed
    assert f'data-replay="{missing}"' in failed and f'data-fork="{missing}"' in failed

    timed_out = alice.submit(session, "sleep 99")
    attempt = claim(db, timed_out)
    start(db, timed_out, attempt)
    running = fragment(alice.conn, timed_out)
    assert 'data-outcome="running"' in running and 'data-limit="30"' in running
    assert 'data-started="' in running and f'data-cancel="{timed_out}"' in running
    record = {"status": "failed", "exit_code": 124, "reason": "timeout", "duration_ms": 30000}
    call(executor(db), "SELECT shell.complete_command(%s, %s, %s, %s)",
         (timed_out, WORKER, attempt, json.dumps(record)))
    html = fragment(alice.conn, timed_out)
    assert 'data-outcome="failed"' in html
    assert "timed out: stopped at the 30 s time limit" in html


def test_a_terminal_command_is_marked_with_its_window_so_history_shows_a_terminal(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    plain = alice.submit(session, "true")
    tty = int(one(alice.conn, "SELECT shell_api.submit_command(%s, 'top', p_tty => true, "
                              "p_cols => 132, p_rows => 43)", (session,)))
    assert "data-tty" not in fragment(alice.conn, plain)
    assert ' data-tty data-cols="132" data-rows="43">' in fragment(alice.conn, tty)


def test_a_terminal_commands_fragments_carry_its_raw_stream_piece_by_piece(db):
    # The page's terminal view writes what a fragment holds: the bytes as the
    # program wrote them (a bare CR survives HTML parsing as &#13;), and in a
    # live piece exactly the bytes from data-from, no colour state before them.
    alice = new_tenant(db, "alice")
    session = alice.session()
    tty = int(one(alice.conn, "SELECT shell_api.submit_command(%s, 'top', p_tty => true)",
                  (session,)))
    attempt = claim(db, tty)
    start(db, tty, attempt)
    append(db, tty, attempt, 0, "\x1b[31mred\rR<b>")
    cursor = one(alice.conn, "SELECT shell_api.session_cursor(%s)", (session,))
    assert '<pre class="out" data-raw>\x1b[31mred&#13;R&lt;b&gt;</pre>' in fragment(alice.conn, tty)
    append(db, tty, attempt, 1, "\n$ ")
    live = one(alice.conn, "SELECT shell_api.session_changes_html(%s, %s, p_tail => true)",
               (session, cursor))
    # The piece's leading newline is doubled: a parser drops the first.
    assert '<pre class="out" data-from="13" data-end="16" data-bytes="16" data-raw>\n\n$ </pre>' \
        in live
    plain = alice.submit(alice.session(), "printf red")
    run(db, plain, "\x1b[31mred")
    coloured = '<pre class="out"><span class="ansi-fg-31">red</span></pre>'
    assert coloured in fragment(alice.conn, plain)


def test_the_prompt_shows_the_directory_under_home_as_a_tilde(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    first = alice.submit(session, "cd d")
    run(db, first, cwd="/home/sandbox/d")
    second = alice.submit(session, "cd /etc")
    run(db, second, cwd="/etc")
    third = alice.submit(session, "pwd")
    assert '<span class="prompt">~ $</span>' in fragment(alice.conn, first)
    assert '<span class="prompt">~/d $</span>' in fragment(alice.conn, second)
    run(db, third)
    assert '<span class="prompt">/etc $</span>' in fragment(alice.conn, third)


def test_limits_are_readable_by_tenants(db):
    alice = new_tenant(db, "alice")
    assert one(alice.conn, "SELECT shell_api.command_limits()") == {"time_limit_s": None}
    call(executor(db), "SELECT shell.publish_time_limit(12.5)")
    assert one(alice.conn, "SELECT shell_api.command_limits()") == {"time_limit_s": 12.5}
    # Only executors publish it.
    with raises_sqlstate("42501"):
        call(alice.conn, "SELECT shell.publish_time_limit(1)")
