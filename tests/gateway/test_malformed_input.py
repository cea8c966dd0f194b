"""Malformed input gets a 4xx with PostgREST's error body, never a 500:
broken JSON, NUL characters, deep nesting, absurd Prefer values and headers.
Named attacks first, then hypothesis throws generated requests at the real
gateway (anonymous and with a token, on a scalar function and on a
function whose rows take PostgREST's query grammar)."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.api import bearer, error, new_session

pytestmark = pytest.mark.postgres

LOGIN = {"p_username": "alice", "p_password": "correct horse"}


def test_broken_json_is_400_pgrst102(http: httpx.Client) -> None:
    answer = http.post("/rpc/login", content=b'{"p_username": "alice",',
                       headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert error(answer)["code"] == "PGRST102"


@pytest.mark.parametrize("body", [
    b'{"p_username": "al\\u0000ice", "p_password": "x"}',
    b'{"p_username": "alice", "p_password": {"k\\u0000": 1}}',
])
def test_a_nul_in_a_json_string_is_400_22p05(http: httpx.Client, body: bytes) -> None:
    answer = http.post("/rpc/login", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert error(answer)["code"] == "22P05"


def test_a_nul_in_a_query_or_form_value_is_400(http: httpx.Client, token: str) -> None:
    grammar = http.get("/rpc/list_sessions?name=eq.a%00b", headers=bearer(token))
    assert (grammar.status_code, error(grammar)["code"]) == (400, "22P05")
    form = http.post("/rpc/login", content=b"p_username=a%00&p_password=x",
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert (form.status_code, error(form)["code"]) == (400, "22P05")


@pytest.mark.parametrize("depth", [65, 10_000, 500_000])
def test_deep_nesting_is_400_pgrst102(http: httpx.Client, depth: int) -> None:
    body = b'{"p_username": ' + b"[" * depth + b"]" * depth + b', "p_password": "x"}'
    answer = http.post("/rpc/login", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    body_error = error(answer)
    assert body_error["code"] == "PGRST102"
    assert body_error["message"] == "the body is nested more than 64 levels deep"


def test_absurd_prefer_values_are_not_errors(http: httpx.Client, token: str) -> None:
    session = new_session(http, token)
    for prefer in ("wait=99999999999999999999999999999", "wait=-1", "count=exact" * 5000,
                   "return=representation, tx=rollback, wait=0, missing=default"):
        answer = http.post("/rpc/session_changes", json={"p_session_id": session},
                           headers={**bearer(token), "Prefer": prefer})
        assert answer.status_code == 200, (prefer[:60], answer.text)


def test_bad_headers_are_4xx(http: httpx.Client, token: str) -> None:
    cases = [
        {"Authorization": "Bearer not.a.token"},
        {"Authorization": "Basic YWxpY2U6eA=="},
        {"Content-Type": "multipart/form-data; boundary=x"},
        {"Content-Type": "text/plain; charset=nonsense"},
        {"Accept": "application/nonsense, */*;q=abc"},
        {"Range": "items=abc-def"},
        {"Range": "0-999999999999999999999999999999"},
    ]
    for headers in cases:
        answer = http.post("/rpc/login", json=LOGIN, headers=headers)
        assert answer.status_code < 500, (headers, answer.status_code, answer.text)
    ranged = http.get("/rpc/list_sessions", headers={**bearer(token), "Range": "9-x"})
    assert ranged.status_code < 500, ranged.text


# Header values as a client library sends them (no surrounding whitespace).
printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=60).map(
    str.strip)
bodies = st.one_of(
    st.binary(max_size=300),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                 lambda inner: st.lists(inner, max_size=4)
                 | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                 max_leaves=20).map(lambda v: json.dumps(v).encode()),  # NaN included
)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(function=st.sampled_from(["login", "list_sessions", "session_changes", "nope"]),
       body=bodies, prefer=printable, accept=printable, content_type=printable, rng=printable,
       signed=st.booleans())
def test_generated_posts_never_get_a_500(http: httpx.Client, token: str, function: str,
                                         body: bytes, prefer: str, accept: str,
                                         content_type: str, rng: str, signed: bool) -> None:
    headers = {"Prefer": prefer, "Accept": accept, "Content-Type": content_type, "Range": rng,
               **(bearer(token) if signed else {})}
    answer = http.post(f"/rpc/{function}", content=body, headers=headers)
    assert answer.status_code < 500, answer.text


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.lists(st.tuples(st.text(max_size=15), st.text(max_size=30)), max_size=4),
       signed=st.booleans())
def test_generated_query_strings_never_get_a_500(http: httpx.Client, token: str,
                                                 query: list[tuple[str, str]],
                                                 signed: bool) -> None:
    answer = http.get("/rpc/list_sessions", params=query,
                      headers=bearer(token) if signed else {})
    assert answer.status_code < 500, (query, answer.text)
