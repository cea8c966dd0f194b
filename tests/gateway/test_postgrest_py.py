"""Supabase's `postgrest` package for Python, used as third-party code uses
it, against the real gateway, database and executor: login, sessions,
commands submitted and read back, filters, order, paging with counts,
singular answers, CSV and errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from postgrest import APIError, CountMethod, SyncPostgrestClient

from tests.fixtures_stack import Daemon, Gateway
from tests.gateway.api import PASSWORD
from tests.support import wait_for

NAMES = ["build", "deploy", "docs", "test", "triage"]


@pytest.fixture
def anonymous(gateway: Gateway) -> Iterator[SyncPostgrestClient]:
    with SyncPostgrestClient(gateway.url) as client:
        yield client


@pytest.fixture
def client(gateway: Gateway, anonymous: SyncPostgrestClient,
           alice: str) -> Iterator[SyncPostgrestClient]:
    token = anonymous.rpc("login", {"p_username": "alice", "p_password": PASSWORD}).execute()
    with SyncPostgrestClient(gateway.url) as signed_in:
        signed_in.auth(token.data["token"])
        yield signed_in


@pytest.fixture
def sessions(client: SyncPostgrestClient) -> dict[str, str]:
    return {name: client.rpc("create_session", {"p_name": name}).execute().data
            for name in NAMES}


def test_login_answers_a_token_and_a_wrong_password_is_28p01(anonymous, alice):
    answer = anonymous.rpc("login", {"p_username": "alice", "p_password": PASSWORD}).execute()
    assert set(answer.data) == {"token"}
    with pytest.raises(APIError) as refused:
        anonymous.rpc("login", {"p_username": "alice", "p_password": "wrong"}).execute()
    assert refused.value.code == "28P01"
    with pytest.raises(APIError) as anon:
        anonymous.rpc("list_sessions", {}).execute()
    assert anon.value.code == "42501"


def test_select_filter_and_order_sessions(client, sessions):
    picked = (client.rpc("list_sessions", {}).select("id,label:name").like("name", "d*")
              .order("name", desc=True).execute())
    assert picked.data == [{"id": sessions["docs"], "label": "docs"},
                           {"id": sessions["deploy"], "label": "deploy"}]
    listed = (client.rpc("list_sessions", {}).select("name").in_("name", ["test", "build", "x"])
              .order("name").execute())
    assert [r["name"] for r in listed.data] == ["build", "test"]
    either = (client.rpc("list_sessions", {}).select("name")
              .or_("name.eq.triage,and(name.like.d*,name.neq.docs)").order("name").execute())
    assert [r["name"] for r in either.data] == ["deploy", "triage"]
    negated = (client.rpc("list_sessions", {}).select("name").not_.like("name", "*t*")
               .order("name").execute())
    assert [r["name"] for r in negated.data] == ["build", "deploy", "docs"]
    unforked = (client.rpc("list_sessions", {}, get=True).select("name")
                .is_("forked_from_command_id", None).gte("name", "t").order("name").execute())
    assert [r["name"] for r in unforked.data] == ["test", "triage"]


def test_paging_with_exact_counts(client, sessions):
    pages = []
    for start in range(0, len(NAMES), 2):
        page = (client.rpc("list_sessions", {}, count=CountMethod.exact).select("name")
                .order("name").range(start, start + 1).execute())
        assert page.count == len(NAMES)
        pages.append([r["name"] for r in page.data])
    assert pages == [["build", "deploy"], ["docs", "test"], ["triage"]]
    filtered = (client.rpc("list_sessions", {}, count=CountMethod.exact).like("name", "*e*")
                .limit(1).execute())
    assert (filtered.count, len(filtered.data)) == (3, 1)  # deploy, test, triage
    head = client.rpc("list_sessions", {}, count=CountMethod.exact, head=True).execute()
    assert head.count == len(NAMES)
    uncounted = client.rpc("list_sessions", {}).limit(2).execute()
    assert (uncounted.count, len(uncounted.data)) == (None, 2)


def test_single_maybe_single_and_csv(client, sessions):
    one = client.rpc("list_sessions", {}).select("id").eq("name", "docs").single().execute()
    assert one.data == {"id": sessions["docs"]}
    with pytest.raises(APIError) as many:
        client.rpc("list_sessions", {}).select("id").like("name", "d*").single().execute()
    assert (many.value.code, many.value.details) == ("PGRST116", "The result contains 2 rows")
    assert client.rpc("list_sessions", {}).eq("name", "none").maybe_single().execute() is None
    csv = (client.rpc("list_sessions", {}).select("name").order("name").limit(2).csv()
           .execute())
    assert csv.data == "name\nbuild\ndeploy"


def test_errors_carry_postgrests_codes(client, sessions):
    with pytest.raises(APIError) as column:
        client.rpc("list_sessions", {}).select("name,secret").execute()
    assert (column.value.code, column.value.message) == (
        "42703", "column list_sessions.secret does not exist")
    with pytest.raises(APIError) as operator:
        client.rpc("list_sessions", {}).filter("name", "regex", "x").execute()
    assert operator.value.code == "PGRST100"
    with pytest.raises(APIError) as unknown:
        client.rpc("submit_command", {"p_session_id": "00000000-0000-0000-0000-000000000000",
                                      "p_command": "true"}).execute()
    assert (unknown.value.code, unknown.value.message) == ("22023", "session not found")
    with pytest.raises(APIError) as missing:
        client.rpc("no_such_function", {}).execute()
    assert missing.value.code == "PGRST202"


def test_commands_submitted_run_and_read_back_with_filters(client, daemon: Daemon):
    session = client.rpc("create_session", {"p_name": "work"}).execute().data
    ids = [client.rpc("submit_command", {"p_session_id": session, "p_command": command})
           .execute().data for command in ("echo one", "false", "echo two")]

    def done() -> list[dict[str, object]]:
        rows = (client.rpc("latest_output", {"p_session_id": session}, count=CountMethod.exact)
                .select("id,command,exit_code,status").eq("status", "done").execute())
        return rows.data if rows.count == len(ids) else []

    finished = wait_for("the three commands", done)
    assert sorted(r["id"] for r in finished) == sorted(ids)
    failed = (client.rpc("latest_output", {"p_session_id": session}, get=True)
              .select("command,exit_code").neq("exit_code", 0).execute())
    assert failed.data == [{"command": "false", "exit_code": 1}]
    echoed = (client.rpc("latest_output", {"p_session_id": session})
              .select("output").like("command", "echo*").order("id", desc=True).execute())
    assert echoed.data == [{"output": "two\n"}, {"output": "one\n"}]
    latest = (client.rpc("latest_output", {"p_session_id": session}).select("command")
              .order("id", desc=True).limit(1).single().execute())
    assert latest.data == {"command": "echo two"}
