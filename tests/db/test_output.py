"""Reading output (pages, the change cursor, HTML), cancelling, forking and
replaying, with the executor side driven as the executor role does."""

from __future__ import annotations

import json

import pytest

from tests.db.api_helpers import (
    WORKER,
    append,
    claim,
    complete,
    listener,
    notifications,
    row_counts,
    run,
    sqlstate,
    start,
    superuser_rows,
)
from tests.support import call, create_user, executor, one, tenant


@pytest.fixture
def alice(db):
    """(dsn, tenant connection, a session of hers)."""
    conn = tenant(db, create_user(db, "alice"))
    sid = one(conn, "SELECT shell_api.create_session('main')")
    return db, conn, sid


def submit(conn, sid: str, command: str) -> int:
    return one(conn, "SELECT shell_api.submit_command(%s, %s)", (sid, command))


def ids(rows: list[dict]) -> list[int]:
    return [r["id"] for r in rows]


# --- latest_output -----------------------------------------------------------

def test_latest_output_pages_oldest_first(alice):
    db, conn, sid = alice
    c = [submit(conn, sid, f"echo {i}") for i in range(5)]
    page = "SELECT id FROM shell_api.latest_output(%s, %s, %s)"
    assert ids(call(conn, "SELECT id FROM shell_api.latest_output(%s)", (sid,))) == c
    assert ids(call(conn, page, (sid, 0, 3))) == c[2:]  # the last three, oldest first
    assert ids(call(conn, page, (sid, c[1], 2))) == c[2:4]  # the first two after c[1]
    assert ids(call(conn, page, (sid, c[1], 20))) == c[2:]
    assert ids(call(conn, page, (sid, c[4], 20))) == []


def test_latest_output_returns_the_whole_row_of_a_finished_command(alice):
    db, conn, sid = alice
    cid = submit(conn, sid, "echo hi; false")
    run(db, cid, "hi\n", exit_code=1, cwd="/tmp", env={})
    rows = call(conn, "SELECT * FROM shell_api.latest_output(%s)", (sid,))
    times = superuser_rows(db,
                           "SELECT submitted_at, started_at, completed_at FROM shell.commands")[0]
    assert rows == [{"id": cid, "command": "echo hi; false", "output": "hi\n", "exit_code": 1,
                     "status": "done", **times,
                     "output_offset": 0, "output_bytes": 3, "output_cut": False}]
    assert times["submitted_at"] <= times["started_at"] <= times["completed_at"]


def test_running_output_is_the_concatenation_of_its_chunks_in_seq_order(alice):
    db, conn, sid = alice
    cid = submit(conn, sid, "make")
    attempt = claim(db, cid)
    start(db, cid, attempt)
    read = "SELECT output, status FROM shell_api.latest_output(%s)"
    assert call(conn, read, (sid,)) == [{"output": "", "status": "running"}]
    append(db, cid, attempt, 1, "second ")
    assert call(conn, read, (sid,)) == [{"output": "second ", "status": "running"}]
    append(db, cid, attempt, 0, "first ")
    append(db, cid, attempt, 2, "third")
    assert call(conn, read, (sid,)) == [{"output": "first second third", "status": "running"}]
    complete(db, cid, attempt, cwd="/", env={})
    assert call(conn, read, (sid,)) == [{"output": "first second third", "status": "done"}]
    # Stored once: the chunks are the output, the row holds no second copy.
    assert superuser_rows(db, "SELECT output, output_bytes FROM shell.commands") == [
        {"output": None, "output_bytes": 18}]


def test_append_output_is_idempotent_per_seq(alice):
    db, conn, sid = alice
    cid = submit(conn, sid, "echo")
    attempt = claim(db, cid)
    start(db, cid, attempt)
    append(db, cid, attempt, 0, "once\n")
    append(db, cid, attempt, 0, "once\n")
    append(db, cid, attempt, 0, "a different retry\n")
    assert call(conn, "SELECT output FROM shell_api.latest_output(%s)",
                (sid,)) == [{"output": "once\n"}]
    assert superuser_rows(db, "SELECT command_id, seq, data FROM shell.output_chunks") == [
        {"command_id": cid, "seq": 0, "data": "once\n"}]
    assert superuser_rows(db, "SELECT output_bytes FROM shell.commands") == [{"output_bytes": 5}]


def test_a_large_output_chunk_is_kept_compressed_with_lz4(alice):
    db, conn, sid = alice
    cid = submit(conn, sid, "make")
    attempt = claim(db, cid)
    start(db, cid, attempt)
    page = "make[1]: Entering directory '/home/sandbox/project'\n" * 1200  # 64 KB
    append(db, cid, attempt, 0, page)
    assert call(conn, "SELECT output FROM shell_api.latest_output(%s)", (sid,)) == [
        {"output": page}]
    # Migration 0049, on a server built with lz4 (pglz took five times as long).
    assert superuser_rows(db, "SELECT pg_column_compression(data) AS method "
                              "FROM shell.output_chunks") == [{"method": "lz4"}]


# --- the change cursor -------------------------------------------------------

def test_every_transition_is_returned_by_the_next_poll(alice):
    db, conn, sid = alice
    other = submit(conn, sid, "echo earlier")
    run(db, other, "earlier\n", cwd="/", env={})
    cursor = max(r["change_seq"]
                 for r in call(conn, "SELECT * FROM shell_api.session_changes(%s)", (sid,)))
    poll = "SELECT id, status, output, exit_code, change_seq FROM shell_api.session_changes(%s, %s)"

    def next_poll(expected: dict) -> None:
        nonlocal cursor
        rows = call(conn, poll, (sid, cursor))
        assert [{k: r[k] for k in expected} for r in rows] == [expected]
        assert rows[0]["change_seq"] > cursor
        cursor = rows[0]["change_seq"]
        assert call(conn, poll, (sid, cursor)) == []

    cid = submit(conn, sid, "echo hi")
    next_poll({"id": cid, "status": "pending", "output": ""})
    attempt = claim(db, cid)
    next_poll({"id": cid, "status": "claimed", "output": ""})
    start(db, cid, attempt)
    next_poll({"id": cid, "status": "running", "output": ""})
    append(db, cid, attempt, 0, "hi\n")
    next_poll({"id": cid, "status": "running", "output": "hi\n"})
    complete(db, cid, attempt, exit_code=0, cwd="/", env={})
    next_poll({"id": cid, "status": "done", "output": "hi\n", "exit_code": 0})


def test_session_changes_returns_the_whole_row(alice):
    db, conn, sid = alice
    cid = submit(conn, sid, "echo hi")
    run(db, cid, "hi\n", exit_code=3, cwd="/", env={})
    rows = call(conn, "SELECT * FROM shell_api.session_changes(%s)", (sid,))
    expected = superuser_rows(db, "SELECT id, command, shell.output_of(c) AS output, exit_code, "
                                  "status, reason, submitted_at, started_at, completed_at, "
                                  "duration_ms, change_seq, 0::bigint AS output_offset, "
                                  "output_bytes, false AS output_cut FROM shell.commands c")
    assert rows == expected
    assert (rows[0]["output"], rows[0]["exit_code"], rows[0]["status"], rows[0]["duration_ms"]) == (
        "hi\n", 3, "done", 12)


def test_session_changes_never_misses_a_change_committed_after_the_poll_started(alice):
    db, conn, sid = alice
    cid = submit(conn, sid, "tail -f log")
    attempt = claim(db, cid)
    start(db, cid, attempt)
    cursor = max(r["change_seq"]
                 for r in call(conn, "SELECT change_seq FROM shell_api.session_changes(%s)",
                               (sid,)))
    ex = executor(db)
    ex.autocommit = False
    call(ex, "SELECT shell.append_output(%s, %s, %s, 0, 'late\n')", (cid, WORKER, attempt))
    # The change is made but not committed: the poll cannot see it yet.
    assert call(conn, "SELECT id FROM shell_api.session_changes(%s, %s)", (sid, cursor)) == []
    ex.commit()
    rows = call(conn, "SELECT id, output, change_seq FROM shell_api.session_changes(%s, %s)",
                (sid, cursor))
    assert [(r["id"], r["output"]) for r in rows] == [(cid, "late\n")]
    assert rows[0]["change_seq"] > cursor


def test_a_change_cursor_only_returns_its_own_sessions_commands(alice):
    db, conn, sid = alice
    other = one(conn, "SELECT shell_api.create_session()")
    mine = submit(conn, sid, "a")
    submit(conn, other, "b")
    assert ids(call(conn, "SELECT id FROM shell_api.session_changes(%s)", (sid,))) == [mine]


# --- HTML --------------------------------------------------------------------

def test_html_escapes_commands_and_output(alice):
    db, conn, sid = alice
    command = "echo '<script>alert(1)</script>' && a&b \"q\""
    cid = submit(conn, sid, command)
    run(db, cid, "<script>x</script> & y\n", cwd="/", env={})
    change = superuser_rows(db, "SELECT change_seq FROM shell.commands")[0]["change_seq"]
    expected = (
        f'<article class="cmd" id="cmd-{cid}" data-id="{cid}" data-status="done" '
        f'data-change="{change}" data-outcome="ok" data-cwd="/"><div class="line">'
        '<span class="prompt">~ $</span> '
        '<span class="text">echo &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39; &amp;&amp; '
        f'a&amp;b &quot;q&quot;</span><span class="actions"><button type="button" class="copy-id" '
        f'data-copy="{cid}" title="copy the command id">#{cid}</button>'
        f'<button type="button" class="fork" data-fork="{cid}">fork from here</button>'
        '<button type="button" class="replay" '
        f'data-replay="{cid}">replay from here</button></span></div>'
        '<pre class="out" data-from="0" data-end="23" data-bytes="23">'
        '&lt;script&gt;x&lt;/script&gt; &amp; y\n'
        '</pre><div class="meta">done · exit 0 · 12 ms</div></article>')
    assert one(conn, "SELECT shell_api.latest_output_html(%s)", (sid,)) == expected
    assert one(conn, "SELECT shell_api.session_changes_html(%s)", (sid,)) == expected


def test_html_of_an_empty_page_is_empty(alice):
    _, conn, sid = alice
    assert one(conn, "SELECT shell_api.latest_output_html(%s)", (sid,)) == ""
    assert one(conn, "SELECT shell_api.session_changes_html(%s)", (sid,)) == ""


def test_submit_command_html_returns_the_pending_fragment(alice):
    db, conn, sid = alice
    html = one(conn, "SELECT shell_api.submit_command_html(%s, %s)", (sid, "cat <a & b>"))
    cid, change = superuser_rows(db, "SELECT id, change_seq FROM shell.commands")[0].values()
    assert html == (
        f'<article class="cmd" id="cmd-{cid}" data-id="{cid}" data-status="pending" '
        f'data-change="{change}" data-outcome="running"><div class="line"><span class="prompt">'
        ' $</span> <span class="text">cat &lt;a &amp; b&gt;</span><span class="actions"><button '
        f'type="button" class="copy-id" data-copy="{cid}" title="copy the command id">#{cid}'
        f'</button><button type="button" class="cancel" data-cancel="{cid}">cancel</button>'
        '</span></div>'
        '<pre class="out"></pre><div class="meta">waiting to run</div></article>')


# --- notifications -----------------------------------------------------------

def test_submitting_notifies_executors_once_per_transaction(alice):
    db, conn, sid = alice
    other = one(conn, "SELECT shell_api.create_session()")
    listen = listener(db, "shell_commands")
    conn.autocommit = False
    submit(conn, sid, "a")
    submit(conn, sid, "b")
    submit(conn, other, "c")
    assert notifications(listen, 1, timeout=0.3) == []  # nothing before commit
    conn.commit()
    assert notifications(listen, 2) == [("shell_commands", "")]
    submit(conn, sid, "d")
    conn.commit()
    assert notifications(listen, 2) == [("shell_commands", "")]
    conn.autocommit = True


def test_a_rolled_back_submit_notifies_nobody(alice):
    db, conn, sid = alice
    listen = listener(db, "shell_commands")
    conn.autocommit = False
    submit(conn, sid, "a")
    conn.rollback()
    assert notifications(listen, 1, timeout=0.3) == []
    assert row_counts(db)["commands"] == 0


# --- cancel ------------------------------------------------------------------

def test_cancelling_a_pending_command_cancels_it_and_it_is_never_claimed(alice):
    db, conn, sid = alice
    cid = submit(conn, sid, "sleep 9")
    assert one(conn, "SELECT shell_api.cancel_command(%s)", (cid,)) is True
    assert call(conn, "SELECT status, output, exit_code FROM shell_api.latest_output(%s)",
                (sid,)) == [
        {"status": "cancelled", "output": "", "exit_code": None}]
    row = superuser_rows(db,
                         "SELECT reason, completed_at IS NOT NULL AS completed FROM shell.commands")
    assert row == [{"reason": "cancelled", "completed": True}]
    assert call(executor(db), "SELECT * FROM shell.claim_commands('w', 10, 30)") == []
    assert superuser_rows(db, "SELECT pending, active_command_id FROM shell.lanes") == [
        {"pending": 0, "active_command_id": None}]


def test_cancelling_the_head_lets_the_next_command_run(alice):
    db, conn, sid = alice
    first = submit(conn, sid, "first")
    second = submit(conn, sid, "second")
    assert one(conn, "SELECT shell_api.cancel_command(%s)", (first,)) is True
    rows = call(executor(db), "SELECT command_id FROM shell.claim_commands('w', 10, 30)")
    assert rows == [{"command_id": second}]


def test_cancelling_a_running_command_flags_it_and_notifies_the_executor(alice):
    db, conn, sid = alice
    cid = submit(conn, sid, "sleep 100")
    attempt = claim(db, cid)
    start(db, cid, attempt)
    listen = listener(db, "shell_cancel")
    heartbeat = "SELECT * FROM shell.heartbeat(%s, %s, %s, 30)"
    assert call(executor(db), heartbeat, (WORKER, [cid], [attempt])) == [
        {"command_id": cid, "cancel_requested": False}]
    assert one(conn, "SELECT shell_api.cancel_command(%s)", (cid,)) is True
    assert notifications(listen, 1) == [("shell_cancel", str(cid))]
    assert call(executor(db), heartbeat, (WORKER, [cid], [attempt])) == [
        {"command_id": cid, "cancel_requested": True}]
    assert call(conn, "SELECT status FROM shell_api.latest_output(%s)",
                (sid,)) == [{"status": "running"}]
    # The executor kills it and reports the end.
    complete(db, cid, attempt, status="cancelled", exit_code=137, cwd="/", env={})
    assert call(conn, "SELECT status, exit_code FROM shell_api.latest_output(%s)", (sid,)) == [
        {"status": "cancelled", "exit_code": 137}]


def test_cancelling_a_finished_command_changes_nothing(alice):
    db, conn, sid = alice
    done = submit(conn, sid, "true")
    run(db, done, cwd="/", env={})
    cancelled = submit(conn, sid, "sleep 1")
    assert one(conn, "SELECT shell_api.cancel_command(%s)", (cancelled,)) is True
    before = superuser_rows(db, "SELECT id, status, reason, completed_at, cancel_requested_at "
                                "FROM shell.commands ORDER BY id")
    listen = listener(db, "shell_cancel")
    for cid in (done, cancelled):
        assert one(conn, "SELECT shell_api.cancel_command(%s)", (cid,)) is False
    assert notifications(listen, 1, timeout=0.3) == []
    assert superuser_rows(db, "SELECT id, status, reason, completed_at, cancel_requested_at "
                              "FROM shell.commands ORDER BY id") == before
    assert [r["status"] for r in before] == ["done", "cancelled"]


# --- fork --------------------------------------------------------------------

def test_fork_starts_a_new_session_from_the_state_after_the_command(alice):
    db, conn, sid = alice
    first = submit(conn, sid, "cd /srv && export A=1")
    run(db, first, cwd="/srv", env={"A": "1"})
    later = submit(conn, sid, "cd /etc && export A=2")
    run(db, later, cwd="/etc", env={"A": "2"})
    fork = one(conn, "SELECT shell_api.fork_session(%s)", (first,))
    assert fork != sid
    listed = {r["id"]: r for r in call(conn, "SELECT * FROM shell_api.list_sessions()")}
    assert set(listed) == {sid, fork}
    assert (listed[fork]["name"], listed[fork]["cwd"], listed[fork]["forked_from_command_id"]) == (
        f"fork of command {first}", "/srv", first)
    owner, env = superuser_rows(db, "SELECT user_id::text, env FROM shell.sessions WHERE id = %s",
                                (fork,))[0].values()
    source_owner = superuser_rows(db, "SELECT user_id::text FROM shell.sessions WHERE id = %s",
                                  (sid,))[0]["user_id"]
    assert (owner, env) == (source_owner, {"A": "1"})
    # The fork's first command starts from that state.
    cid = submit(conn, fork, "pwd")
    rows = call(executor(db), "SELECT command_id, cwd, env FROM shell.claim_commands('w', 10, 30)")
    assert rows == [{"command_id": cid, "cwd": "/srv", "env": {"A": "1"}}]


@pytest.mark.parametrize("state", ["pending", "claimed", "running", "cancelled"])
def test_forking_a_command_that_did_not_finish_is_refused(alice, state):
    db, conn, sid = alice
    cid = submit(conn, sid, "sleep 9")
    if state in ("claimed", "running"):
        attempt = claim(db, cid)
        if state == "running":
            start(db, cid, attempt)
    if state == "cancelled":
        one(conn, "SELECT shell_api.cancel_command(%s)", (cid,))
    before = row_counts(db)
    assert sqlstate(conn, "SELECT shell_api.fork_session(%s)", (cid,)) == (
        "22023", f"command {cid} has not finished running")
    assert row_counts(db) == before


# --- replay ------------------------------------------------------------------

@pytest.fixture
def history(alice):
    """Three originals in alice's session: two ran (cd /a, then cd /b), one pending."""
    db, conn, sid = alice
    c1 = submit(conn, sid, "cd /a")
    run(db, c1, cwd="/a", env={"STEP": "1"})
    c2 = submit(conn, sid, "cd /b")
    run(db, c2, cwd="/b", env={"STEP": "2"})
    c3 = submit(conn, sid, "ls")
    return db, conn, sid, [c1, c2, c3]


def replayed(db: str, run_id: str) -> list[dict]:
    return superuser_rows(db, "SELECT session_id::text, command, status, replay_run_id::text, "
                              "replay_of_command_id, image_digest FROM shell.commands "
                              "WHERE session_id = %s ORDER BY id", (run_id,))


def test_replay_requeues_the_originals_from_the_start_command(history):
    db, conn, sid, (c1, c2, c3) = history
    run_id = one(conn, "SELECT shell_api.replay_session(%s, %s)", (sid, c2))
    assert replayed(db, run_id) == [
        {"session_id": run_id, "command": "cd /b", "status": "pending", "replay_run_id": run_id,
         "replay_of_command_id": c2, "image_digest": "sha256:abc"},
        {"session_id": run_id, "command": "ls", "status": "pending", "replay_run_id": run_id,
         "replay_of_command_id": c3, "image_digest": None},
    ]
    listed = {r["id"]: r for r in call(conn, "SELECT * FROM shell_api.list_sessions()")}
    assert set(listed) == {sid, run_id}
    assert (listed[run_id]["name"], listed[run_id]["replay_of_session_id"]) == (
        f"replay of main from {c2}", sid)
    # It starts from the state the start command started from.
    assert superuser_rows(db, "SELECT cwd, env FROM shell.sessions WHERE id = %s", (run_id,)) == [
        {"cwd": "/a", "env": {"STEP": "1"}}]
    # The source session is untouched.
    assert ids(call(conn, "SELECT id FROM shell_api.latest_output(%s)", (sid,))) == [c1, c2, c3]


def test_replaying_twice_copies_only_the_originals(history):
    db, conn, sid, (c1, c2, c3) = history
    first = one(conn, "SELECT shell_api.replay_session(%s, %s)", (sid, c1))
    second = one(conn, "SELECT shell_api.replay_session(%s, %s)", (sid, c1))
    assert first != second
    for run_id in (first, second):
        rows = replayed(db, run_id)
        assert [(r["command"], r["replay_of_command_id"], r["replay_run_id"]) for r in rows] == [
            ("cd /a", c1, run_id), ("cd /b", c2, run_id), ("ls", c3, run_id)]
    assert superuser_rows(db, "SELECT cwd, env FROM shell.sessions WHERE id = %s", (second,)) == [
        {"cwd": "/home/sandbox", "env": {}}]


def test_replaying_from_a_copy_or_another_sessions_command_is_refused(history):
    db, conn, sid, (c1, _, _) = history
    run_id = one(conn, "SELECT shell_api.replay_session(%s, %s)", (sid, c1))
    copy = replayed(db, run_id)
    copy_id = superuser_rows(db, "SELECT min(id) AS id FROM shell.commands WHERE session_id = %s",
                             (run_id,))[0]["id"]
    assert copy[0]["replay_of_command_id"] == c1
    before = row_counts(db)
    for session, start_id in ((run_id, copy_id), (sid, copy_id), (run_id, c1)):
        assert sqlstate(conn, "SELECT shell_api.replay_session(%s, %s)", (session, start_id)) == (
            "22023", f"command {start_id} is not an original command of this session")
    assert row_counts(db) == before


def test_a_replay_runs_each_command_in_the_state_left_by_the_one_before(history):
    db, conn, sid, (c1, c2, c3) = history
    run_id = one(conn, "SELECT shell_api.replay_session(%s, %s)", (sid, c1))
    copies = superuser_rows(db, "SELECT id FROM shell.commands WHERE session_id = %s ORDER BY id",
                            (run_id,))
    seen = []
    states = [("/a", {"STEP": "1"}), ("/b", {"STEP": "2"}), ("/b", {"STEP": "2"})]
    for copy, (cwd, env) in zip([r["id"] for r in copies], states):
        rows = call(executor(db), "SELECT command_id, cwd, env, attempt"
                                  " FROM shell.claim_commands('w', 10, 30) WHERE session_id = %s",
                    (run_id,))
        assert [r["command_id"] for r in rows] == [copy]
        seen.append((rows[0]["cwd"], rows[0]["env"]))
        call(executor(db),
             "SELECT shell.complete_command(%s, 'w', %s, %s)",
             (copy, rows[0]["attempt"], json.dumps({"status": "done", "exit_code": 0,
                                                    "cwd_after": cwd, "env_after": env})))
    assert seen == [("/home/sandbox", {}), ("/a", {"STEP": "1"}), ("/b", {"STEP": "2"})]


def test_a_session_with_a_long_name_can_be_replayed(alice):
    db, conn, _ = alice
    sid = one(conn, "SELECT shell_api.create_session(%s)", ("n" * 200,))
    cid = submit(conn, sid, "ls")
    run_id = one(conn, "SELECT shell_api.replay_session(%s, %s)", (sid, cid))
    name = superuser_rows(db, "SELECT name FROM shell.sessions WHERE id = %s", (run_id,))[0]["name"]
    assert name == "replay of " + "n" * 150 + f" from {cid}"
