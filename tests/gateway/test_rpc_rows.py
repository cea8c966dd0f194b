"""PostgREST's query grammar on a set-returning function's rows, over HTTP
against the real gateway and a fresh database: columns and renames,
filters and logic trees, order, paging with counts, 206/416, singular
objects, CSV, OpenAPI at `/`, and PostgREST's error codes for everything
the grammar refuses. The clients' own view is in test_postgrest_clients.py."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.gateway.api import bearer, error, new_session, rpc
from tests.support import connect_as, create_user, one

NAMES = ["alpha", "beta", "Gamma", "delta,epsilon", 'quote"d']


@pytest.fixture
def sessions(http: httpx.Client, token: str) -> dict[str, str]:
    """alice's sessions by name, created in NAMES' order."""
    return {name: new_session(http, token, name) for name in NAMES}


def listing(http: httpx.Client, token: str, params: Any = None,
            headers: dict[str, str] | None = None, get: bool = False) -> httpx.Response:
    sent = {**bearer(token), **(headers or {})}
    if get:
        return http.get("/rpc/list_sessions", params=params, headers=sent)
    return http.post("/rpc/list_sessions", params=params, json={}, headers=sent)


def names(answer: httpx.Response) -> list[str]:
    assert answer.status_code in (200, 206), answer.text
    return [row["name"] for row in answer.json()]


def test_select_picks_and_renames_columns(http, token, sessions):
    answer = listing(http, token, {"select": "name,key:id", "order": "name"})
    assert answer.status_code == 200
    assert answer.json() == [{"name": n, "key": sessions[n]} for n in sorted(NAMES)]
    assert answer.headers["content-range"] == "0-4/*"


@pytest.mark.parametrize("params, expected", [
    ({"name": "eq.alpha"}, ["alpha"]),
    ({"name": "neq.alpha"}, ["Gamma", "beta", "delta,epsilon", 'quote"d']),
    ({"name": "gt.beta"}, ["delta,epsilon", 'quote"d']),
    ({"name": "gte.beta"}, ["beta", "delta,epsilon", 'quote"d']),
    ({"name": "lt.beta"}, ["Gamma", "alpha"]),
    ({"name": "lte.alpha"}, ["Gamma", "alpha"]),
    ({"name": "like.*a"}, ["Gamma", "alpha", "beta"]),
    ({"name": "ilike.g*"}, ["Gamma"]),
    ({"name": 'in.(alpha,"delta,epsilon")'}, ["alpha", "delta,epsilon"]),
    ({"name": "in.()"}, []),
    ({"forked_from_command_id": "is.null", "name": "not.like.*a*"}, ['quote"d']),
    ({"name": "not.in.(alpha,beta,Gamma)"}, ["delta,epsilon", 'quote"d']),
    ({"or": "(name.eq.alpha,name.eq.beta)"}, ["alpha", "beta"]),
    ({"or": '(name.eq."delta,epsilon",and(name.like.*a,name.neq.alpha))'},
     ["Gamma", "beta", "delta,epsilon"]),
    ({"not.or": "(name.like.*a*,name.like.*l*)"}, ['quote"d']),
    ({"and": "(name.gt.a,or(name.eq.beta,name.eq.Gamma))"}, ["beta"]),
    ({"name": 'eq.quote"d'}, ['quote"d']),
])
def test_filters_and_logic_trees(http, token, sessions, params, expected):
    ordered = {**params, "order": "name"}
    collated = sorted(expected, key=lambda n: one_collation(n))
    assert names(listing(http, token, ordered)) == collated
    assert names(listing(http, token, ordered, get=True)) == collated


def one_collation(name: str) -> bytes:
    """The test database's collation is C (bytewise), so ORDER BY name sorts this way."""
    return name.encode()


def test_order_directions_and_nulls(http, token, sessions, db):
    assert names(listing(http, token, {"order": "name.desc"})) == sorted(
        NAMES, key=one_collation, reverse=True)
    conn = connect_as(db, "shell_admin")
    try:
        collation = one(conn, "SELECT datcollate FROM pg_database "
                              "WHERE datname = current_database()")
    finally:
        conn.close()
    assert collation in ("C", "C.UTF-8", "POSIX"), collation  # one_collation's premise
    # forked_from_command_id is null everywhere: nulls go where asked, then name decides.
    for order in ("forked_from_command_id.asc.nullsfirst,name.asc",
                  "forked_from_command_id.desc.nullslast,name"):
        assert names(listing(http, token, {"order": order})) == sorted(NAMES, key=one_collation)


def test_limit_offset_and_exact_counts_describe_the_whole_result(http, token, sessions):
    page = listing(http, token, {"order": "name", "limit": "2", "offset": "1"},
                   {"Prefer": "count=exact"})
    assert page.status_code == 206
    assert page.headers["content-range"] == "1-2/5"
    assert names(page) == ["alpha", "beta"]
    filtered = listing(http, token, {"name": "like.*a*", "order": "name", "limit": "1"},
                       {"Prefer": "count=exact"})
    assert (filtered.status_code, filtered.headers["content-range"]) == (206, "0-0/4")
    whole = listing(http, token, {"order": "name"}, {"Prefer": "count=exact"})
    assert (whole.status_code, whole.headers["content-range"]) == (200, "0-4/5")
    uncounted = listing(http, token, {"order": "name", "limit": "2", "offset": "3"})
    assert (uncounted.status_code, uncounted.headers["content-range"]) == (200, "3-4/*")
    estimated = listing(http, token, {"limit": "2"}, {"Prefer": "count=estimated"})
    assert estimated.headers["content-range"] == "0-1/5"
    planned = listing(http, token, {"limit": "2"}, {"Prefer": "count=planned"})
    assert planned.status_code in (200, 206)
    assert re.fullmatch(r"0-1/\d+", planned.headers["content-range"])


def test_empty_pages_and_offsets_past_the_end(http, token, sessions):
    at_end = listing(http, token, {"offset": "5"}, {"Prefer": "count=exact"})
    assert (at_end.status_code, at_end.headers["content-range"], at_end.json()) == (
        206, "*/5", [])
    past = listing(http, token, {"offset": "6"}, {"Prefer": "count=exact"})
    assert past.status_code == 416
    assert past.headers["content-range"] == "*/5"
    assert error(past) == {"code": "PGRST103", "message": "Requested range not satisfiable",
                           "details": "An offset of 6 was requested, but there are only 5 rows.",
                           "hint": None}
    nothing = listing(http, token, {"name": "eq.nobody"}, {"Prefer": "count=exact"})
    assert (nothing.status_code, nothing.headers["content-range"], nothing.json()) == (
        200, "*/0", [])
    zero = listing(http, token, {"limit": "0"}, {"Prefer": "count=exact"})
    assert (zero.status_code, zero.headers["content-range"]) == (206, "*/5")


def test_the_range_header_pages_a_get(http, token, sessions):
    ranged = {"Range": "1-3", "Range-Unit": "items", "Prefer": "count=exact"}
    got = listing(http, token, {"order": "name"}, ranged, get=True)
    assert (got.status_code, got.headers["content-range"]) == (206, "1-3/5")
    assert names(got) == ["alpha", "beta", "delta,epsilon"]
    # With limit/offset too, the page is where both agree.
    both = listing(http, token, {"order": "name", "offset": "2", "limit": "5"}, ranged, get=True)
    assert both.headers["content-range"] == "2-3/5"
    open_ended = listing(http, token, {"order": "name"}, {"Range": "4-"}, get=True)
    assert (open_ended.headers["content-range"], names(open_ended)) == ("4-4/*", ['quote"d'])
    backwards = listing(http, token, {}, {"Range": "3-1"}, get=True)
    assert backwards.status_code == 416
    assert error(backwards)["code"] == "PGRST103"
    # As in PostgREST, POST is not paged by the Range header.
    posted = listing(http, token, {}, ranged)
    assert (posted.status_code, posted.headers["content-range"]) == (200, "0-4/5")


def test_a_singular_object_or_406(http, token, sessions):
    single = {"Accept": "application/vnd.pgrst.object+json"}
    one_row = listing(http, token, {"name": "eq.beta", "select": "id"}, single)
    assert one_row.status_code == 200
    assert one_row.headers["content-type"].startswith("application/vnd.pgrst.object+json")
    assert one_row.json() == {"id": sessions["beta"]}
    for params, rows in [({"name": "eq.nobody"}, 0), ({"name": "like.*a*"}, 4)]:
        refused = listing(http, token, params, single)
        assert refused.status_code == 406
        assert error(refused) == {
            "code": "PGRST116", "message": "JSON object requested, multiple (or no) rows returned",
            "details": f"The result contains {rows} rows", "hint": None}


def test_csv_is_postgresql_record_text_with_a_header(http, token, sessions):
    answer = listing(http, token, {"select": "name,created:created_at", "order": "name",
                                   "limit": "4"}, {"Accept": "text/csv"})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/csv")
    header, *lines = answer.text.split("\n")
    assert header == "name,created"
    assert [line.rsplit(",", 1)[0] for line in lines] == [
        "Gamma", "alpha", "beta", '"delta,epsilon"']
    assert all(re.fullmatch(r'"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\+00"', line.rsplit(",", 1)[1])
               for line in lines), lines


def test_get_splits_arguments_from_filters_as_postgrest_does(http, token, sessions):
    session = sessions["alpha"]
    for command in ("echo one", "echo two", "true"):
        assert rpc(http, "submit_command", token, p_session_id=session,
                   p_command=command).status_code == 200
    answer = http.get("/rpc/latest_output", headers=bearer(token),
                      params={"p_session_id": session, "command": "like.echo*",
                              "select": "command,status", "order": "id.desc"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == [{"command": "echo two", "status": "pending"},
                             {"command": "echo one", "status": "pending"}]
    typo = http.get("/rpc/latest_output", headers=bearer(token),
                    params={"p_session_id": session, "p_sinec_id": "1"})
    assert (typo.status_code, error(typo)["code"]) == (404, "PGRST202")


@pytest.mark.parametrize("params, code", [
    ({"select": "name,nope"}, "42703"),
    ({"nope": "eq.1"}, "42703"),
    ({"order": "nope.desc"}, "42703"),
    ({"or": "(nope.eq.1)"}, "42703"),
    ({"name": "equals.x"}, "PGRST100"),
    ({"name": "fts.x"}, "PGRST100"),
    ({"name": "is.maybe"}, "PGRST100"),
    ({"name": "in.alpha"}, "PGRST100"),
    ({"order": "name.sideways"}, "PGRST100"),
    ({"limit": "-1"}, "PGRST100"),
    ({"offset": "x"}, "PGRST100"),
    ({"or": "name.eq.alpha"}, "PGRST100"),
    ({"or": "(name.eq.alpha"}, "PGRST100"),
    ({"select": "name::text"}, "PGRST100"),
    ({"select": "sessions(id)"}, "PGRST100"),
    ({"select": "name->x"}, "PGRST100"),
    ({"id": "eq.not-a-uuid"}, "22P02"),
])
def test_what_the_grammar_refuses_is_400_with_postgrests_code(http, token, sessions, params,
                                                                code):
    answer = listing(http, token, params)
    assert answer.status_code == 400, answer.text
    assert error(answer)["code"] == code


INJECTIONS = [
    {"select": 'name,"id"; DROP TABLE shell.sessions; --'},
    {"select": 'x:name) FROM shell.users --'},
    {"select": "name,(select password_hash from shell.users)"},
    {'name" = name OR "1': "eq.1"},
    {"name": "eq.' OR '1'='1"},
    {"name": "eq.x'); DROP TABLE shell.sessions; --"},
    {"name": "like.%' OR true --"},
    {"name": "in.(a') OR true --,b)"},
    {"name": "is.null OR true"},
    {"name": "eq;select.1"},
    {"order": "name; DROP TABLE shell.sessions"},
    {"order": "(select 1)"},
    {"order": "name.desc.nullsfirst, id) --"},
    {"or": "(name.eq.x,id.eq.x) OR true --)"},
    {"or": "(name.eq.a,and(name.eq.b,name.eq.c)) OR (true"},
    {"limit": "1; DROP TABLE shell.sessions"},
    {"offset": "0 UNION SELECT * FROM shell.users"},
    {"select": "name", "name": "eq.\\'; --"},
]


@pytest.mark.parametrize("params", INJECTIONS)
def test_injection_through_the_grammar_reads_only_what_the_caller_may(http, token, sessions, db,
                                                                       params):
    other = create_user(db, "mallory")
    conn = connect_as(db, "shell_admin")
    try:
        one(conn, "SELECT count(*) FROM shell.users")
    finally:
        conn.close()
    for get in (False, True):
        answer = listing(http, token, params, {"Range": "0; DROP TABLE x"}, get=get)
        # 404: a GET parameter that reads as no filter is an argument, and no such one exists.
        assert answer.status_code in (200, 400, 404), answer.text
        if answer.status_code != 200:
            assert error(answer)["code"] in ("PGRST100", "42703", "22P02", "PGRST202"), answer.text
        else:
            returned = {row["id"] for row in answer.json() if "id" in row}
            assert returned <= set(sessions.values()), answer.text
            assert "password_hash" not in answer.text
    # Nothing was dropped or changed: the listing is whole, and mallory still exists.
    assert sorted(names(listing(http, token, {"order": "name"}))) == sorted(NAMES)
    conn = connect_as(db, "shell_admin")
    try:
        assert one(conn, "SELECT count(*) FROM shell.users WHERE id = %s", (other,)) == 1
    finally:
        conn.close()


def test_openapi_at_the_root_for_clients_and_the_page_for_browsers(http, token):
    described = http.get("/", headers={"Accept": "application/openapi+json"})
    assert described.status_code == 200
    assert described.headers["content-type"].startswith("application/openapi+json")
    spec = described.json()
    assert spec["swagger"] == "2.0"
    listed = spec["paths"]["/rpc/list_sessions"]
    assert set(listed) == {"get", "post"}
    assert {p["name"] for p in listed["get"]["parameters"]} >= {"select", "order", "limit",
                                                               "offset", "Range", "Prefer"}
    assert set(spec["paths"]["/rpc/submit_command"]) == {"post"}  # volatile: POST only
    submit = spec["paths"]["/rpc/submit_command"]["post"]["parameters"][0]["schema"]
    assert submit["required"] == ["p_session_id", "p_command"]
    assert submit["properties"]["p_session_id"] == {"type": "string", "format": "uuid"}
    page = http.get("/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
