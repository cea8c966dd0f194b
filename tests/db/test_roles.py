"""The role matrix: who may call what, and what each caller sees. Every
security promise of DESIGN.md §3 is tried here as the attacker would."""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass

import jwt
import psycopg2
import pytest

from tests.db.api_helpers import (
    admin,
    error_of,
    row_counts,
    run,
    sqlstate,
    superuser_rows,
)
from tests.support import call, connect_as, create_user, executor, one, tenant

PASSWORD = "correct horse"

TENANT_FUNCTIONS = (
    "create_session", "list_sessions", "submit_command", "latest_output", "latest_output_html",
    "session_changes", "session_changes_html", "session_cursor", "submit_command_html",
    "cancel_command", "fork_session", "replay_session", "replay_comparison", "output_timeline",
    "session_files", "read_file", "command_changes", "upload_file", "read_output",
    "read_output_html", "rename_session", "archive_session", "unarchive_session", "warm_session",
    "command_limits",
    "upload_part", "upload_finish", "upload_discard", "read_file_part",
    "send_input", "close_input", "resize_terminal", "command_input",
    "sessions_html", "session_lineage_html", "session_files_html", "replay_comparison_html",
    "list_templates", "template_options_html",
    "set_secret", "delete_secret", "list_secrets", "set_session_secrets", "secrets_html",
    "secret_choices_html",
)
UPLOAD_ID = "00000000-0000-4000-8000-000000000023"
API_FUNCTIONS = ("login",) + TENANT_FUNCTIONS

EXECUTOR_CALLS = {
    "claim_commands": "SELECT * FROM shell.claim_commands('w', 10, 30)",
    "heartbeat": "SELECT * FROM shell.heartbeat('w', ARRAY[1]::bigint[], ARRAY[1], 30)",
    "mark_started": "SELECT shell.mark_started(1, 'w', 1, 'c', 'd')",
    "append_output": "SELECT shell.append_output(1, 'w', 1, 0, 'x')",
    "complete_command": "SELECT shell.complete_command(1, 'w', 1, '{\"status\": \"done\"}')",
    "expire_leases": "SELECT * FROM shell.expire_leases()",
    "settle_worker": "SELECT * FROM shell.settle_worker('w', '{}')",
    "live_commands": "SELECT * FROM shell.live_commands(ARRAY[1]::bigint[])",
    "queue_depth": "SELECT shell.queue_depth()",
    "current_images": "SELECT * FROM shell.current_images()",
    "missing_blobs": "SELECT * FROM shell.missing_blobs(ARRAY['x'])",
    "put_blob_chunk": "SELECT shell.put_blob_chunk(repeat('a', 64), 1, 1, 0, 'x')",
    "blob_chunk": "SELECT shell.blob_chunk('x', 0)",
    "put_trees": "SELECT shell.put_trees('[]')",
    "tree_listing": "SELECT * FROM shell.tree_listing('x')",
    "tree_diff": "SELECT * FROM shell.tree_diff('x', 'y')",
    "complete_upload": "SELECT shell.complete_upload(1, 'w', 1)",
    "command_terminal": "SELECT shell.command_terminal(1, 'w', 1)",
    "pending_input": "SELECT * FROM shell.pending_input(1, 'w', 1, 0)",
    "input_delivered": "SELECT shell.input_delivered(1, 'w', 1, 0, ARRAY[]::integer[])",
    "terminal_echo": "SELECT shell.terminal_echo(1, 'w', 1, false)",
    "seal_input": "SELECT * FROM shell.seal_input(1, 'w', 1)",
}
ADMIN_CALLS = {
    "create_user": "SELECT shell.create_user('mallory', 'password123')",
    "set_user_quota": "SELECT * FROM shell.set_user_quota('alice', 1000, 1000, 1000)",
    "usage_report": "SELECT * FROM shell.usage_report('mallory')",
    "promote_image": "SELECT * FROM shell.promote_image('sha256:' || repeat('a', 64))",
    "image_usage": "SELECT * FROM shell.image_usage()",
    "define_template": "SELECT * FROM shell.define_template('mine', 'x', true)",
    "set_user_templates": "SELECT * FROM shell.set_user_templates('alice', ARRAY['base'])",
    "collect_files": "SELECT * FROM shell.collect_files('1 hour')",
    "audit_input": "SELECT * FROM shell.audit_input(%(bob_session)s::uuid)",
}
# Definer helpers that would let a tenant act as someone else or forge a token.
INTERNAL_CALLS = {
    "new_session": "SELECT shell.new_session(%(bob)s::uuid, 'x', '/', '{}')",
    "enqueue": "SELECT shell.enqueue(s, 'id') FROM shell.sessions s",
    "owned_session": "SELECT shell.owned_session(%(bob_session)s::uuid)",
    "owned_command": "SELECT shell.owned_command(%(bob_command)s)",
    "sign_jwt": "SELECT shell.sign_jwt('{\"sub\": \"x\", \"role\": \"shell_admin\"}')",
    "jwt_secret": "SELECT shell.jwt_secret()",
    "release_command": "SELECT shell.release_command(c, true, 'x', false) FROM shell.commands c",
    "leased_command": "SELECT * FROM shell.leased_command(1, 'w', 1, ARRAY['running'])",
    "held_command": "SELECT shell.held_command(1, 'w', 1)",
    "add_input": "SELECT shell.add_input(c, 'data', 'x') FROM shell.commands c",
    "input_target": "SELECT shell.input_target(%(bob_command)s)",
    "usable_templates": "SELECT * FROM shell.usable_templates(%(bob)s::uuid)",
}


@dataclass
class World:
    alice: str
    bob: str
    session: str  # alice's
    done: int  # alice's finished command (output "hi\n", cwd /home/sandbox/x, env A=1)
    pending: int  # alice's queued command
    bob_session: str
    bob_command: int  # bob's finished command


@pytest.fixture
def world(db) -> World:
    alice = create_user(db, "alice", PASSWORD)
    bob = create_user(db, "bob", PASSWORD)
    a = tenant(db, alice)
    b = tenant(db, bob)
    session = one(a, "SELECT shell_api.create_session('main')")
    done = one(a, "SELECT shell_api.submit_command(%s, 'echo hi')", (session,))
    run(db, done, "hi\n", cwd="/home/sandbox/x", env={"A": "1"})
    bob_session = one(b, "SELECT shell_api.create_session('bobs')")
    bob_command = one(b, "SELECT shell_api.submit_command(%s, 'echo secret')", (bob_session,))
    run(db, bob_command, "bob's secret\n", cwd="/home/sandbox", env={})
    pending = one(a, "SELECT shell_api.submit_command(%s, 'sleep 1')", (session,))
    a.close()
    b.close()
    return World(alice, bob, session, done, pending, bob_session, bob_command)


def api_call(name: str, session: str, command: int,
             start_id: int | None = None) -> tuple[str, tuple]:
    """The SQL of one shell_api call about this session / command."""
    return {
        "login": ("SELECT shell_api.login('alice', %s)", (PASSWORD,)),
        "create_session": ("SELECT shell_api.create_session('new')", ()),
        "list_sessions": ("SELECT * FROM shell_api.list_sessions()", ()),
        "list_templates": ("SELECT * FROM shell_api.list_templates()", ()),
        "template_options_html": ("SELECT shell_api.template_options_html()", ()),
        "submit_command": ("SELECT shell_api.submit_command(%s, 'echo more')", (session,)),
        "latest_output": ("SELECT * FROM shell_api.latest_output(%s)", (session,)),
        "latest_output_html": ("SELECT shell_api.latest_output_html(%s)", (session,)),
        "session_changes": ("SELECT * FROM shell_api.session_changes(%s)", (session,)),
        "session_changes_html": ("SELECT shell_api.session_changes_html(%s)", (session,)),
        "session_cursor": ("SELECT shell_api.session_cursor(%s)", (session,)),
        "submit_command_html": ("SELECT shell_api.submit_command_html(%s, 'echo more')",
                                (session,)),
        "cancel_command": ("SELECT shell_api.cancel_command(%s)", (command,)),
        "fork_session": ("SELECT shell_api.fork_session(%s)", (command,)),
        "replay_session": ("SELECT shell_api.replay_session(%s, %s)",
                           (session, command if start_id is None else start_id)),
        "replay_comparison": ("SELECT * FROM shell_api.replay_comparison(%s)", (session,)),
        "output_timeline": ("SELECT * FROM shell_api.output_timeline(%s)", (command,)),
        "read_output": ("SELECT * FROM shell_api.read_output(%s)", (command,)),
        "read_output_html": ("SELECT shell_api.read_output_html(%s)", (command,)),
        "session_files": ("SELECT * FROM shell_api.session_files(%s)", (session,)),
        "read_file": ("SELECT shell_api.read_file(%s, 'f')", (session,)),
        "command_changes": ("SELECT * FROM shell_api.command_changes(%s)", (command,)),
        "upload_file": ("SELECT shell_api.upload_file(%s, 'f', '\\x00')", (session,)),
        "rename_session": ("SELECT shell_api.rename_session(%s, 'renamed')", (session,)),
        "archive_session": ("SELECT shell_api.archive_session(%s)", (session,)),
        "unarchive_session": ("SELECT shell_api.unarchive_session(%s)", (session,)),
        "warm_session": ("SELECT shell_api.warm_session(%s)", (session,)),
        "command_limits": ("SELECT shell_api.command_limits()", ()),
        "upload_part": ("SELECT shell_api.upload_part(%s, 0, '\\x00')", (UPLOAD_ID,)),
        "upload_finish": ("SELECT shell_api.upload_finish(%s, %s, 'f')", (UPLOAD_ID, session)),
        "upload_discard": ("SELECT shell_api.upload_discard(%s)", (UPLOAD_ID,)),
        "read_file_part": ("SELECT * FROM shell_api.read_file_part(%s, 'f')", (session,)),
        "send_input": ("SELECT shell_api.send_input(%s, 'x')", (command,)),
        "close_input": ("SELECT shell_api.close_input(%s)", (command,)),
        "resize_terminal": ("SELECT shell_api.resize_terminal(%s, 80, 24)", (command,)),
        "command_input": ("SELECT * FROM shell_api.command_input(%s)", (command,)),
        "sessions_html": ("SELECT shell_api.sessions_html()", ()),
        "session_lineage_html": ("SELECT shell_api.session_lineage_html(%s)", (session,)),
        "session_files_html": ("SELECT shell_api.session_files_html(%s)", (session,)),
        "replay_comparison_html": ("SELECT shell_api.replay_comparison_html(%s)", (session,)),
        "set_secret": ("SELECT shell_api.set_secret('TOKEN', 's3cr3t-value')", ()),
        "delete_secret": ("SELECT shell_api.delete_secret('TOKEN')", ()),
        "list_secrets": ("SELECT * FROM shell_api.list_secrets()", ()),
        "set_session_secrets": ("SELECT shell_api.set_session_secrets(%s, '{}')", (session,)),
        "secrets_html": ("SELECT shell_api.secrets_html()", ()),
        "secret_choices_html": ("SELECT shell_api.secret_choices_html(%s)", (session,)),
    }[name]


def test_the_matrix_covers_every_shell_api_function(db):
    rows = superuser_rows(db, "SELECT p.proname FROM pg_proc p "
                              "WHERE p.pronamespace = 'shell_api'::regnamespace ORDER BY 1")
    assert sorted(r["proname"] for r in rows) == sorted(API_FUNCTIONS)


# --- anonymous ---------------------------------------------------------------

@pytest.mark.parametrize("name", TENANT_FUNCTIONS)
def test_anonymous_cannot_call_tenant_functions(db, world, name):
    anon = connect_as(db, "shell_anon")
    before = row_counts(db)
    sql, params = api_call(name, world.session, world.done)
    code, message = sqlstate(anon, sql, params)
    assert code == "42501"
    assert message.startswith("permission denied for function")
    assert row_counts(db) == before


def test_anonymous_login_returns_a_verifiable_token_for_the_user(db, world):
    anon = connect_as(db, "shell_anon")
    answer = one(anon, "SELECT shell_api.login('alice', %s)", (PASSWORD,))
    assert set(answer) == {"token"}
    secret = superuser_rows(db, "SELECT shell.jwt_secret() AS s")[0]["s"]
    assert jwt.get_unverified_header(answer["token"]) == {"alg": "HS256", "typ": "JWT"}
    claims = jwt.decode(answer["token"], secret, algorithms=["HS256"])
    now = time.time()
    assert set(claims) == {"sub", "role", "iat", "exp"}
    assert claims["sub"] == world.alice
    assert claims["role"] == "shell_user"
    assert now - 60 < claims["iat"] <= now + 1
    assert claims["exp"] == claims["iat"] + 43200
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(answer["token"], "x" * 64, algorithms=["HS256"])


def test_login_token_is_never_issued_in_the_future(db, world):
    # iat must be the login time truncated to the second: a rounded-up iat
    # makes verifiers reject a fresh token as "not yet valid". The fraction of
    # now() varies per transaction, so a few logins catch rounding.
    anon = connect_as(db, "shell_anon")
    for _ in range(8):
        row = call(anon, "SELECT shell_api.login('alice', %s) AS answer, "
                         "extract(epoch FROM now()) AS now_epoch", (PASSWORD,))[0]
        claims = jwt.decode(row["answer"]["token"], options={"verify_signature": False})
        assert claims["iat"] == int(row["now_epoch"])  # floor: epochs are positive


def test_a_login_token_gives_its_claims_the_tenant_identity(db, world):
    anon = connect_as(db, "shell_anon")
    token = one(anon, "SELECT shell_api.login('alice', %s)", (PASSWORD,))["token"]
    secret = superuser_rows(db, "SELECT shell.jwt_secret() AS s")[0]["s"]
    claims = jwt.decode(token, secret, algorithms=["HS256"])
    conn = connect_as(db, "shell_user", claims)
    listed = call(conn, "SELECT id FROM shell_api.list_sessions()")
    assert [r["id"] for r in listed] == [world.session]


def test_login_with_a_wrong_password_or_unknown_user_fails_identically(db, world):
    # A failure is answered, not raised (raising would roll back the failure
    # count that throttles guessing): PostgREST's error body, status 403.
    anon = connect_as(db, "shell_anon")
    wrong = one(anon, "SELECT shell_api.login('alice', 'wrong password')")
    unknown = one(anon, "SELECT shell_api.login('nobody', %s)", (PASSWORD,))
    null_password = one(anon, "SELECT shell_api.login('alice', NULL)")
    for answer in (wrong, unknown, null_password):
        assert answer == {"code": "28P01", "message": "invalid username or password",
                          "details": None, "hint": None}


def test_login_is_for_anonymous_callers_only(db, world):
    for conn in (tenant(db, world.alice), executor(db), admin(db)):
        code, _ = sqlstate(conn, "SELECT shell_api.login('alice', %s)", (PASSWORD,))
        assert code == "42501"


# --- the owner ---------------------------------------------------------------

def test_owner_create_session_makes_a_session_with_a_lane(db, world):
    sid = one(tenant(db, world.alice), "SELECT shell_api.create_session('new')")
    rows = superuser_rows(db, "SELECT s.user_id::text, s.name, s.cwd, s.env, "
                              "s.forked_from_command_id, s.replay_of_session_id, l.user_id::text "
                              "AS lane_user, l.pending FROM shell.sessions s JOIN shell.lanes l ON "
                              "l.session_id = s.id WHERE s.id = %s", (sid,))
    assert rows == [{"user_id": world.alice, "name": "new", "cwd": "/home/sandbox", "env": {},
                     "forked_from_command_id": None, "replay_of_session_id": None,
                     "lane_user": world.alice, "pending": 0}]


def test_owner_list_sessions_lists_only_their_own(db, world):
    a = tenant(db, world.alice)
    second = one(a, "SELECT shell_api.create_session()")
    rows = call(a, "SELECT id, name, cwd FROM shell_api.list_sessions()")
    assert sorted((r["id"], r["name"], r["cwd"]) for r in rows) == sorted(
        [(world.session, "main", "/home/sandbox/x"), (second, None, "/home/sandbox")])


def test_owner_submit_command_queues_it(db, world):
    cid = one(tenant(db, world.alice), "SELECT shell_api.submit_command(%s, 'echo more')",
              (world.session,))
    assert cid > world.pending
    assert superuser_rows(db, "SELECT session_id::text, user_id::text, command, status "
                              "FROM shell.commands WHERE id = %s", (cid,)) == [
        {"session_id": world.session, "user_id": world.alice, "command": "echo more",
         "status": "pending"}]


def test_owner_latest_output_and_session_changes_show_their_commands(db, world):
    a = tenant(db, world.alice)
    rows = call(a, "SELECT id, command, output, exit_code, status FROM shell_api.latest_output(%s)",
                (world.session,))
    assert rows == [
        {"id": world.done, "command": "echo hi", "output": "hi\n", "exit_code": 0,
         "status": "done"},
        {"id": world.pending, "command": "sleep 1", "output": "", "exit_code": None,
         "status": "pending"},
    ]
    changes = call(a, "SELECT id, status FROM shell_api.session_changes(%s)", (world.session,))
    assert changes == [{"id": world.done, "status": "done"},
                       {"id": world.pending, "status": "pending"}]
    for fn in ("latest_output_html", "session_changes_html"):
        html = one(a, f"SELECT shell_api.{fn}(%s)", (world.session,))
        assert html.count('<article class="cmd"') == 2, fn
        assert f'id="cmd-{world.done}" data-id="{world.done}" data-status="done"' in html, fn
        pending = world.pending
        assert f'id="cmd-{pending}" data-id="{pending}" data-status="pending"' in html, fn
        assert '<pre class="out" data-from="0" data-end="3" data-bytes="3">hi\n</pre>' in html, fn


def test_owner_submit_command_html_returns_the_pending_fragment(db, world):
    html = one(tenant(db, world.alice), "SELECT shell_api.submit_command_html(%s, 'echo more')",
               (world.session,))
    cid, change = superuser_rows(db, "SELECT id, change_seq FROM shell.commands "
                                     "ORDER BY id DESC LIMIT 1")[0].values()
    assert cid > world.pending
    assert html == (f'<article class="cmd" id="cmd-{cid}" data-id="{cid}" data-status="pending" '
                    f'data-change="{change}" data-outcome="running"><div class="line">'
                    '<span class="prompt"> $</span> <span class="text">echo more</span>'
                    '<span class="actions"><button type="button" class="copy-id" '
                    f'data-copy="{cid}" title="copy the command id">#{cid}</button>'
                    f'<button type="button" class="cancel" data-cancel="{cid}">cancel</button>'
                    '</span></div><pre class="out"></pre>'
                    '<div class="meta">waiting to run</div></article>')


def test_owner_cancel_fork_and_replay_work(db, world):
    a = tenant(db, world.alice)
    assert one(a, "SELECT shell_api.cancel_command(%s)", (world.pending,)) is True
    fork = one(a, "SELECT shell_api.fork_session(%s)", (world.done,))
    replay = one(a, "SELECT shell_api.replay_session(%s, %s)", (world.session, world.done))
    assert superuser_rows(db, "SELECT id::text, user_id::text, cwd, env FROM shell.sessions "
                              "WHERE id IN (%s, %s) ORDER BY cwd", (fork, replay)) == [
        {"id": replay, "user_id": world.alice, "cwd": "/home/sandbox", "env": {}},
        {"id": fork, "user_id": world.alice, "cwd": "/home/sandbox/x", "env": {"A": "1"}},
    ]
    assert superuser_rows(db, "SELECT id, status FROM shell.commands WHERE id = %s",
                          (world.pending,)) == [
        {"id": world.pending, "status": "cancelled"}]


# --- another tenant ----------------------------------------------------------

ID_FUNCTIONS = ("submit_command", "latest_output", "latest_output_html", "session_changes",
                "session_changes_html", "session_cursor", "submit_command_html", "cancel_command",
                "fork_session", "replay_session", "replay_comparison", "output_timeline",
                "read_output", "read_output_html", "rename_session", "archive_session",
                "unarchive_session", "warm_session", "read_file_part", "send_input", "close_input",
                "resize_terminal", "command_input", "session_lineage_html", "session_files_html",
                "replay_comparison_html", "set_session_secrets", "secret_choices_html")


@pytest.mark.parametrize("name", ID_FUNCTIONS)
def test_another_tenants_ids_look_exactly_like_nonexistent_ones(db, world, name):
    mallory = tenant(db, world.bob)
    missing_command = world.bob_command + 1000
    before = row_counts(db)
    target = (world.pending if name == "cancel_command" else world.done)
    foreign = error_of(mallory, *api_call(name, world.session, target))
    # A nonexistent session (replay: and command) must give the same answer.
    missing = error_of(mallory, *api_call(name, str(uuid.uuid4()), missing_command))
    assert row_counts(db) == before
    by_command = ("cancel_command", "fork_session", "output_timeline", "read_output",
                  "read_output_html", "send_input", "close_input", "resize_terminal",
                  "command_input")
    expected = "command not found" if name in by_command else "session not found"
    for exc in (foreign, missing):
        assert exc.pgcode == "22023"
        assert exc.diag.message_primary == expected
    assert foreign.diag.message_hint == missing.diag.message_hint
    assert foreign.diag.message_detail == missing.diag.message_detail


def test_replaying_from_another_tenants_command_looks_like_a_nonexistent_command(db, world):
    mallory = tenant(db, world.bob)
    before = row_counts(db)
    foreign = error_of(mallory, "SELECT shell_api.replay_session(%s, %s)",
                       (world.bob_session, world.done))
    missing = error_of(mallory, "SELECT shell_api.replay_session(%s, %s)",
                       (world.bob_session, 10**9))
    assert row_counts(db) == before
    assert (foreign.pgcode, foreign.diag.message_primary) == (
        "22023", f"command {world.done} is not an original command of this session")
    assert (missing.pgcode, missing.diag.message_primary) == (
        "22023", f"command {10**9} is not an original command of this session")
    assert foreign.diag.message_hint == missing.diag.message_hint


def test_another_tenant_cannot_cancel_a_running_command(db, world):
    a = tenant(db, world.alice)
    sid = one(a, "SELECT shell_api.create_session()")
    cid = one(a, "SELECT shell_api.submit_command(%s, 'sleep 100')", (sid,))
    rows = call(executor(db), "SELECT * FROM shell.claim_commands('w', 10, 30)")
    assert cid in [r["command_id"] for r in rows]
    code, message = sqlstate(tenant(db, world.bob), "SELECT shell_api.cancel_command(%s)", (cid,))
    assert (code, message) == ("22023", "command not found")
    assert superuser_rows(db, "SELECT status, cancel_requested_at FROM shell.commands"
                              " WHERE id = %s", (cid,)) == [
        {"status": "claimed", "cancel_requested_at": None}]


# --- broken identities -------------------------------------------------------

def bad_identities(alice: str) -> dict[str, str | None]:
    """request.jwt.claims values that must not identify anybody."""
    return {
        "no claims": None,
        "empty claims": "",
        "claims not json": "not json",
        "no sub": json.dumps({"role": "shell_user"}),
        "malformed sub": json.dumps({"sub": "nope", "role": "shell_user"}),
        "sub of nobody": json.dumps({"sub": str(uuid.uuid4()), "role": "shell_user"}),
        "role not shell_user": json.dumps({"sub": alice, "role": "shell_admin"}),
        "no role": json.dumps({"sub": alice}),
    }


def as_identity(dsn: str, claims: str | None) -> psycopg2.extensions.connection:
    conn = connect_as(dsn, "shell_user")
    if claims is not None:
        call(conn, "SELECT set_config('request.jwt.claims', %s, false)", (claims,))
    return conn


@pytest.mark.parametrize("name", TENANT_FUNCTIONS)
@pytest.mark.parametrize("ids", ["existing", "nonexistent"])
def test_a_missing_or_foreign_identity_is_refused(db, world, name, ids):
    if ids == "existing":
        target = world.pending if name == "cancel_command" else world.done
        sql, params = api_call(name, world.session, target)
    else:
        sql, params = api_call(name, str(uuid.uuid4()), 10**9)
    before = row_counts(db)
    for identity, claims in bad_identities(world.alice).items():
        conn = as_identity(db, claims)
        assert sqlstate(conn, sql, params) == ("42501", "not signed in"), identity
        conn.close()
    assert row_counts(db) == before


def test_a_missing_identity_is_refused_even_before_any_session_exists(db):
    create_user(db, "alice", PASSWORD)
    for identity, claims in bad_identities(str(uuid.uuid4())).items():
        conn = as_identity(db, claims)
        for name in TENANT_FUNCTIONS:
            sql, params = api_call(name, str(uuid.uuid4()), 1)
            assert sqlstate(conn, sql, params) == ("42501", "not signed in"), (identity, name)
        conn.close()
    assert row_counts(db)["sessions"] == 0


def test_a_missing_or_foreign_identity_reads_no_rows(db, world):
    for identity, claims in bad_identities(world.alice).items():
        conn = as_identity(db, claims)
        for table in ("sessions", "commands", "output_chunks"):
            refused = sqlstate(conn, f"SELECT * FROM shell.{table}")
            assert refused == ("42501", "not signed in"), identity
        conn.close()


# --- direct table access -----------------------------------------------------

def test_a_tenant_selects_only_their_own_rows(db, world):
    a = tenant(db, world.alice)
    assert [r["id"] for r in call(a, "SELECT id::text FROM shell.sessions")] == [world.session]
    own = call(a, "SELECT id FROM shell.commands ORDER BY id")
    assert [r["id"] for r in own] == [world.done, world.pending]
    assert call(a, "SELECT command_id, seq, data FROM shell.output_chunks") == [
        {"command_id": world.done, "seq": 0, "data": "hi\n"}]
    b = tenant(db, world.bob)
    assert call(b, "SELECT command_id, data FROM shell.output_chunks") == [
        {"command_id": world.bob_command, "data": "bob's secret\n"}]


WRITES = {
    "sessions": [
        "INSERT INTO shell.sessions (user_id) VALUES (%(me)s)",
        "UPDATE shell.sessions SET cwd = '/'",
        "DELETE FROM shell.sessions",
    ],
    "commands": [
        "INSERT INTO shell.commands (session_id, user_id, command) VALUES "
        "(%(session)s, %(me)s, 'x')",
        "UPDATE shell.commands SET status = 'done', completed_at = now()",
        "DELETE FROM shell.commands",
    ],
    "output_chunks": [
        "INSERT INTO shell.output_chunks (command_id, seq, data) VALUES (%(command)s, 9, 'x')",
        "UPDATE shell.output_chunks SET data = 'x'",
        "DELETE FROM shell.output_chunks",
    ],
    "command_input": [
        "INSERT INTO shell.command_input (command_id, seq, offset_ms, kind, data, sha256) VALUES "
        "(%(command)s, 9, 0, 'data', 'x', 'x')",
        "UPDATE shell.command_input SET data = 'x'",
        "DELETE FROM shell.command_input",
    ],
}


@pytest.mark.parametrize("statement", [s for t in WRITES.values() for s in t])
def test_a_tenant_cannot_write_tables_directly(db, world, statement):
    a = tenant(db, world.alice)
    before = row_counts(db)
    code, message = sqlstate(a, statement,
                             {"me": world.alice, "session": world.session, "command": world.done})
    assert code == "42501"
    assert message.startswith("permission denied for table")
    assert row_counts(db) == before


@pytest.mark.parametrize("table",
                         ["users", "lanes", "config", "migrations", "blobs", "blob_chunks", "trees",
                          "tree_entries", "secret_input"])
@pytest.mark.parametrize("statement", ["SELECT * FROM shell.{t}", "DELETE FROM shell.{t}",
                                       "UPDATE shell.{t} SET {c} = {c}", "TRUNCATE shell.{t}"])
def test_a_tenant_cannot_touch_private_tables(db, world, table, statement):
    column = {"users": "username", "lanes": "pending", "config": "value", "migrations": "name",
              "blobs": "size", "blob_chunks": "data", "trees": "size",
              "tree_entries": "mode", "secret_input": "data"}[table]
    a = tenant(db, world.alice)
    code, message = sqlstate(a, statement.format(t=table, c=column))
    assert (code, message) == ("42501", f"permission denied for table {table}")


# --- executor and admin entry points -----------------------------------------

@pytest.mark.parametrize("role", ["shell_user", "shell_anon"])
@pytest.mark.parametrize("name", list(EXECUTOR_CALLS) + list(ADMIN_CALLS) + list(INTERNAL_CALLS))
def test_tenants_and_anonymous_cannot_call_private_functions(db, world, role, name):
    conn = tenant(db, world.alice) if role == "shell_user" else connect_as(db, "shell_anon")
    sql = {**EXECUTOR_CALLS, **ADMIN_CALLS, **INTERNAL_CALLS}[name]
    before = row_counts(db)
    code, message = sqlstate(conn, sql, {"bob": world.bob, "bob_session": world.bob_session,
                                         "bob_command": world.bob_command})
    assert code == "42501"
    if role == "shell_anon":
        # Anonymous requests may use schema shell for PostgREST's pre-request
        # (shell.request_slot) and nothing else in it: no function, no table.
        assert re.fullmatch(rf"permission denied for (function {name}|table \w+)", message)
    else:
        assert message == f"permission denied for function {name}"
    assert row_counts(db) == before


@pytest.mark.parametrize("name", TENANT_FUNCTIONS)
def test_the_executor_cannot_call_the_tenant_api(db, world, name):
    sql, params = api_call(name, world.session, world.done)
    assert sqlstate(executor(db), sql, params) == ("42501",
                                                   "permission denied for schema shell_api")


@pytest.mark.parametrize("table",
                         ["users", "sessions", "lanes", "commands", "output_chunks", "config",
                          "migrations", "images", "command_input", "secret_input",
                          "templates", "template_grants"])
def test_the_executor_cannot_read_tables(db, world, table):
    assert sqlstate(executor(db), f"SELECT * FROM shell.{table}") == (
        "42501", f"permission denied for table {table}")


@pytest.mark.parametrize("name", list(ADMIN_CALLS) + ["new_session", "sign_jwt", "jwt_secret"])
def test_the_executor_cannot_call_admin_or_internal_functions(db, world, name):
    sql = {**ADMIN_CALLS, **INTERNAL_CALLS}[name]
    code, message = sqlstate(executor(db), sql,
                             {"bob": world.bob, "bob_session": world.bob_session})
    assert (code, message) == ("42501", f"permission denied for function {name}")


# --- catalog-wide promises ---------------------------------------------------

def test_no_function_is_executable_by_public(db):
    rows = superuser_rows(db, """
        SELECT p.oid::regprocedure::text AS fn,
               has_function_privilege('public', p.oid, 'EXECUTE') AS by_public,
               EXISTS (SELECT FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                       WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE') AS acl_public
        FROM pg_proc p
        WHERE p.pronamespace IN ('shell'::regnamespace, 'shell_api'::regnamespace)
        ORDER BY 1""")
    assert len(rows) > 40  # ours plus pgcrypto's: the query really looks
    claim = "shell.claim_commands(text,integer,integer,text,integer,text[],integer)"
    assert claim in [r["fn"] for r in rows]
    assert [r["fn"] for r in rows if r["by_public"] or r["acl_public"]] == []


def test_every_table_a_tenant_can_select_has_row_level_security(db):
    rows = superuser_rows(db, """
        SELECT c.relname, c.relrowsecurity
        FROM pg_class c
        WHERE c.relnamespace = 'shell'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND has_any_column_privilege('shell_user', c.oid, 'SELECT')
        ORDER BY 1""")
    assert rows == [{"relname": "command_input", "relrowsecurity": True},
                    {"relname": "commands", "relrowsecurity": True},
                    {"relname": "output_chunks", "relrowsecurity": True},
                    {"relname": "sessions", "relrowsecurity": True}]


@pytest.mark.parametrize("role", ["shell_anon", "shell_executor", "shell_authenticator", "public"])
def test_no_other_role_can_read_any_table(db, role):
    rows = superuser_rows(db, """
        SELECT c.relname FROM pg_class c
        WHERE c.relnamespace IN ('shell'::regnamespace, 'shell_api'::regnamespace)
          AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND has_any_column_privilege(%s, c.oid, 'SELECT')""", (role,))
    assert rows == []
