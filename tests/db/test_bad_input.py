"""Bad input and quotas: every refusal has the right SQLSTATE and writes nothing."""

from __future__ import annotations

import uuid

import psycopg2
import pytest

from tests.db.api_helpers import (
    admin,
    claim,
    error_of,
    row_counts,
    run,
    sqlstate,
    start,
    superuser_rows,
)
from tests.support import call, create_user, one, tenant

MIB = 1048576


@pytest.fixture
def alice(db):
    """(dsn, user id, tenant connection, a session of hers)."""
    uid = create_user(db, "alice")
    conn = tenant(db, uid)
    sid = one(conn, "SELECT shell_api.create_session('main')")
    return db, uid, conn, sid


def commands_of(dsn: str) -> list[tuple[int, int]]:
    return [(r["id"], r["bytes"]) for r in
            superuser_rows(dsn, "SELECT id, octet_length(command) AS bytes FROM "
                                "shell.commands ORDER BY id")]


# --- commands ----------------------------------------------------------------

@pytest.mark.parametrize("command", ["", " ", " \t\r\n\f\v ", None],
                         ids=["empty", "space", "whitespace", "null"])
def test_an_empty_command_is_refused(alice, command):
    db, _, conn, sid = alice
    before = row_counts(db)
    for fn in ("submit_command", "submit_command_html"):
        exc = error_of(conn, f"SELECT shell_api.{fn}(%s, %s)", (sid, command))
        assert (exc.pgcode, exc.diag.message_primary) == ("22023", "command is empty"), fn
        assert exc.diag.message_hint == "Type a command to run."
    assert row_counts(db) == before


@pytest.mark.parametrize("command", ["v", "vv", "\tv\n", "x", "."])
def test_a_short_command_is_not_mistaken_for_whitespace(alice, command):
    db, uid, conn, sid = alice
    cid = one(conn, "SELECT shell_api.submit_command(%s, %s)", (sid, command))
    assert superuser_rows(db, "SELECT id, command, status FROM shell.commands") == [
        {"id": cid, "command": command, "status": "pending"}]


def test_a_command_over_one_mebibyte_is_refused(alice):
    db, _, conn, sid = alice
    before = row_counts(db)
    for command in ("x" * (MIB + 1), "é" * (MIB // 2) + "x"):  # bytes count, not characters
        exc = error_of(conn, "SELECT shell_api.submit_command(%s, %s)", (sid, command))
        assert (exc.pgcode, exc.diag.message_primary) == (
            "PT413", "command is too large (1048577 bytes)")
        assert exc.diag.message_detail == "A command may be at most 1048576 bytes."
    assert row_counts(db) == before


def test_a_command_of_exactly_one_mebibyte_is_accepted_intact(alice):
    db, _, conn, sid = alice
    first = one(conn, "SELECT shell_api.submit_command(%s, %s)", (sid, "x" * MIB))
    second = one(conn, "SELECT shell_api.submit_command(%s, %s)", (sid, "é" * (MIB // 2)))
    assert commands_of(db) == [(first, MIB), (second, MIB)]
    rows = superuser_rows(db, "SELECT command = repeat('é', %s) AS intact FROM "
                              "shell.commands WHERE id = %s",
                          (MIB // 2, second))
    assert rows == [{"intact": True}]


def test_a_nul_byte_never_reaches_the_database(alice):
    db, _, conn, sid = alice
    before = row_counts(db)
    # psycopg2 refuses to send it at all.
    with pytest.raises(ValueError, match="NUL"):
        call(conn, "SELECT shell_api.submit_command(%s, %s)", (sid, "echo a\x00b"))
    # Built inside SQL, PostgreSQL's text type cannot hold it.
    assert sqlstate(conn, "SELECT shell_api.submit_command(%s, 'echo a' || chr(0))", (sid,)) == (
        "54000", "null character not permitted")
    code, message = sqlstate(conn, "SELECT shell_api.submit_command(%s, "
                                   "convert_from('\\x610062'::bytea, 'UTF8'))",
                             (sid,))
    assert (code, message) == ("22021", 'invalid byte sequence for encoding "UTF8": 0x00')
    assert row_counts(db) == before


# --- ids ---------------------------------------------------------------------

@pytest.mark.parametrize("sql", [
    "SELECT shell_api.submit_command(%s, 'ls')",
    "SELECT * FROM shell_api.latest_output(%s)",
    "SELECT * FROM shell_api.session_changes(%s)",
    "SELECT shell_api.replay_session(%s, 1)",
])
def test_a_malformed_session_id_is_invalid_text(alice, sql):
    db, _, conn, _ = alice
    before = row_counts(db)
    assert sqlstate(conn, sql, ("nope",)) == ("22P02", 'invalid input syntax for type uuid: "nope"')
    assert row_counts(db) == before


def test_an_unknown_or_foreign_session_is_not_found(alice):
    db, _, conn, sid = alice
    bob = tenant(db, create_user(db, "bob"))
    before = row_counts(db)
    for who, session in ((conn, str(uuid.uuid4())), (bob, sid)):
        exc = error_of(who, "SELECT shell_api.submit_command(%s, 'ls')", (session,))
        assert (exc.pgcode, exc.diag.message_primary) == ("22023", "session not found")
        assert exc.diag.message_hint == "Use an id returned by create_session or list_sessions."
    assert row_counts(db) == before


# --- paging ------------------------------------------------------------------

@pytest.mark.parametrize("fn", ["latest_output", "session_changes"])
@pytest.mark.parametrize("since, limit, message", [
    (0, 0, "p_limit must be between 1 and 1000"),
    (0, 1001, "p_limit must be between 1 and 1000"),
    (0, -1, "p_limit must be between 1 and 1000"),
    (0, None, "p_limit must be between 1 and 1000"),
    (-1, 20, "p_since_id must be 0 or a command id"),
    (None, 20, "p_since_id must be 0 or a command id"),
])
def test_out_of_range_paging_is_refused(alice, fn, since, limit, message):
    _, _, conn, sid = alice
    one(conn, "SELECT shell_api.submit_command(%s, 'ls')", (sid,))
    assert sqlstate(conn, f"SELECT * FROM shell_api.{fn}(%s, %s, %s)",
                    (sid, since, limit)) == ("22023", message)


def test_paging_limits_at_the_edges_are_accepted(alice):
    _, _, conn, sid = alice
    cid = one(conn, "SELECT shell_api.submit_command(%s, 'ls')", (sid,))
    for fn in ("latest_output", "session_changes"):
        for limit in (1, 1000):
            assert [r["id"] for r in call(conn, f"SELECT id FROM shell_api.{fn}(%s, 0, %s)",
                                          (sid, limit))] == [cid]


# --- session names -----------------------------------------------------------

def test_a_session_name_must_be_1_to_200_characters(alice):
    db, _, conn, _ = alice
    before = row_counts(db)
    for name in ("n" * 201, ""):
        assert sqlstate(conn, "SELECT shell_api.create_session(%s)", (name,)) == (
            "22023", "session name must be 1 to 200 characters")
    assert row_counts(db) == before
    sid = one(conn, "SELECT shell_api.create_session(%s)", ("é" * 200,))
    assert superuser_rows(db, "SELECT length(name) AS n FROM shell.sessions WHERE id = %s",
                          (sid,)) == [{"n": 200}]


# --- quotas ------------------------------------------------------------------

def test_set_user_quota_reports_the_new_quotas(db):
    create_user(db, "alice")
    assert call(admin(db), "SELECT * FROM shell.set_user_quota('alice', 3, NULL, 7)") == [
        {"username": "alice", "max_sessions": 3, "max_running": 2, "max_queued": 7,
         "max_output_mb": 1024, "max_files_mb": 1024, "max_tree_entries": 10000,
         "max_root_entries": 200000, "max_uploads_per_minute": 60, "terminal_idle_s": 900,
         "terminal_max_s": 7200, "max_inputs_per_second": 100}]


def test_set_user_quota_refuses_negative_quotas_and_unknown_users(db):
    create_user(db, "alice")
    conn = admin(db)
    before = superuser_rows(db, "SELECT max_sessions, max_running, max_queued FROM shell.users")
    assert sqlstate(conn, "SELECT * FROM shell.set_user_quota('alice', -1)") == (
        "22023", "quotas cannot be negative")
    unknown = sqlstate(conn, "SELECT * FROM shell.set_user_quota('nobody', 1, 1, 1)")
    assert unknown == ("22023", "no user nobody")
    quotas = superuser_rows(db, "SELECT max_sessions, max_running, max_queued FROM shell.users")
    assert quotas == before


def test_sessions_beyond_the_quota_are_refused(alice):
    db, _, conn, _ = alice
    call(admin(db), "SELECT * FROM shell.set_user_quota('alice', 2, NULL, NULL)")
    one(conn, "SELECT shell_api.create_session()")
    before = row_counts(db)
    exc = error_of(conn, "SELECT shell_api.create_session()")
    assert (exc.pgcode, exc.diag.message_primary) == ("PT429", "session quota reached (2 sessions)")
    assert exc.diag.message_hint == (
        "Archive sessions you no longer need, or ask an administrator to raise max_sessions.")
    assert row_counts(db) == before


def test_forks_and_replays_count_against_the_session_quota(alice):
    db, _, conn, sid = alice
    cid = one(conn, "SELECT shell_api.submit_command(%s, 'ls')", (sid,))
    run(db, cid, "out\n", cwd="/tmp", env={})
    call(admin(db), "SELECT * FROM shell.set_user_quota('alice', 1, NULL, NULL)")
    before = row_counts(db)
    for sql, params in (("SELECT shell_api.fork_session(%s)", (cid,)),
                        ("SELECT shell_api.replay_session(%s, %s)", (sid, cid))):
        assert sqlstate(conn, sql, params) == ("PT429", "session quota reached (1 sessions)")
    assert row_counts(db) == before


def test_commands_beyond_the_queue_quota_are_refused(alice):
    db, _, conn, sid = alice
    call(admin(db), "SELECT * FROM shell.set_user_quota('alice', NULL, NULL, 3)")
    other = one(conn, "SELECT shell_api.create_session()")
    running = one(conn, "SELECT shell_api.submit_command(%s, 'sleep 9')", (sid,))
    start(db, running, claim(db, running))
    claimed = one(conn, "SELECT shell_api.submit_command(%s, 'sleep 9')", (other,))
    claim(db, claimed)
    one(conn, "SELECT shell_api.submit_command(%s, 'queued')", (sid,))
    assert superuser_rows(db, "SELECT status FROM shell.commands ORDER BY id") == [
        {"status": "running"}, {"status": "claimed"}, {"status": "pending"}]
    before = row_counts(db)
    for sql, params in (("SELECT shell_api.submit_command(%s, 'one more')", (sid,)),
                        ("SELECT shell_api.submit_command_html(%s, 'one more')", (other,)),
                        ("SELECT shell_api.replay_session(%s, %s)", (sid, running))):
        exc = error_of(conn, sql, params)
        assert (exc.pgcode, exc.diag.message_primary) == (
            "PT429", "command queue quota reached (3 unfinished commands)"), sql
        assert exc.diag.message_hint == "Wait for commands to finish, or cancel some."
    assert row_counts(db) == before
    # Finished commands no longer count.
    assert one(conn, "SELECT shell_api.cancel_command(%s)", (before["commands"],)) is True
    assert one(conn, "SELECT shell_api.submit_command(%s, 'one more')", (sid,)) == 4


# --- users -------------------------------------------------------------------

@pytest.mark.parametrize("username", ["Alice", "", "1abc", "a b", "a" * 64, "ünï", None])
def test_create_user_refuses_a_bad_username(db, username):
    before = row_counts(db)
    exc = error_of(admin(db), "SELECT shell.create_user(%s, 'long enough')", (username,))
    assert exc.pgcode == "22023"
    assert exc.diag.message_primary.startswith("invalid username ")
    assert row_counts(db) == before


@pytest.mark.parametrize("password", ["short", "1234567", "", None])
def test_create_user_refuses_a_short_password(db, password):
    before = row_counts(db)
    assert sqlstate(admin(db), "SELECT shell.create_user('alice', %s)", (password,)) == (
        "22023", "password too short")
    assert row_counts(db) == before


def test_create_user_accepts_the_shortest_and_longest_valid_input(db):
    conn = admin(db)
    one(conn, "SELECT shell.create_user(%s, '12345678')", ("a" * 63,))
    one(conn, "SELECT shell.create_user('_', '12345678')")
    rows = superuser_rows(db, "SELECT username FROM shell.users ORDER BY 1")
    assert [r["username"] for r in rows] == ["_", "a" * 63]


def test_create_user_refuses_a_duplicate(db):
    create_user(db, "alice")
    before = row_counts(db)
    assert sqlstate(admin(db), "SELECT shell.create_user('alice', 'another password')") == (
        "23505", "user alice already exists")
    assert row_counts(db) == before


def test_a_tenant_cannot_create_users_or_change_quotas(alice):
    db, _, conn, _ = alice
    with pytest.raises(psycopg2.Error) as info:
        call(conn, "SELECT shell.set_user_quota('alice', 1000, 1000, 1000)")
    assert info.value.pgcode == "42501"
    assert superuser_rows(db, "SELECT max_sessions, max_running, max_queued FROM shell.users") == [
        {"max_sessions": 20, "max_running": 2, "max_queued": 100}]
