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

from tests.gateway.api import bearer, error, new_session, rpc

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


def nested_logic(depth: int, operator: str = "or") -> str:
    """An `or=` value whose logic trees nest ``depth`` deep around one filter."""
    return "(" + f"{operator}(" * (depth - 1) + "name.eq.a" + ")" * depth


@pytest.mark.parametrize("depth", [65, 1_500, 4_000])
def test_a_deeply_nested_logic_tree_is_400_pgrst100(http: httpx.Client, token: str,
                                                    depth: int) -> None:
    for key, operator in (("or", "or"), ("and", "not.and")):
        answer = http.get("/rpc/list_sessions", params={key: nested_logic(depth, operator)},
                          headers=bearer(token))
        assert answer.status_code == 400, answer.text[:300]
        body = error(answer)
        assert body["code"] == "PGRST100"
        assert body["details"] == "logic trees may nest at most 64 levels deep"


def test_a_logic_tree_64_deep_is_answered(http: httpx.Client, token: str) -> None:
    new_session(http, token, "a")
    new_session(http, token, "b")
    answer = http.get("/rpc/list_sessions", params={"or": nested_logic(64), "select": "name"},
                      headers=bearer(token))
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json() == [{"name": "a"}]


HUGE = "9" * 5_000


@pytest.mark.parametrize("name", ["limit", "offset"])
@pytest.mark.parametrize("value", [HUGE, "9223372036854775808", "0" * 4_999 + "1x"])
def test_a_count_beyond_bigint_is_400_pgrst100(http: httpx.Client, token: str, name: str,
                                               value: str) -> None:
    answer = http.get("/rpc/list_sessions", params={name: value}, headers=bearer(token))
    assert answer.status_code == 400, answer.text[:300]
    body = error(answer)
    assert body["code"] == "PGRST100"
    assert body["message"].startswith(f'"failed to parse {name} parameter (')
    assert len(body["message"]) < 200  # the value is not echoed whole


def test_the_largest_counts_are_answered(http: httpx.Client, token: str) -> None:
    new_session(http, token)
    biggest = str(2**63 - 1)
    answer = http.get("/rpc/list_sessions", params={"limit": "0" * 4_000 + biggest, "offset": "0"},
                      headers=bearer(token))
    assert answer.status_code == 200, answer.text[:300]
    assert len(answer.json()) == 1
    past = http.get("/rpc/list_sessions", params={"offset": biggest}, headers=bearer(token))
    assert (past.status_code, past.json()) == (200, [])


@pytest.mark.parametrize("rng", [f"{HUGE}-", f"0-{HUGE}", f"items={HUGE}-{HUGE}",
                                 "9223372036854775808-"])
def test_a_range_beyond_bigint_is_400_pgrst100(http: httpx.Client, token: str,
                                               rng: str) -> None:
    answer = http.get("/rpc/list_sessions", headers={**bearer(token), "Range": rng})
    assert answer.status_code == 400, answer.text[:300]
    body = error(answer)
    assert body["code"] == "PGRST100"
    assert body["message"] == '"failed to parse Range header"'


def test_a_huge_prefer_wait_is_the_longest_wait(http: httpx.Client, token: str) -> None:
    """As a 29-digit one (test_absurd_prefer_values_are_not_errors): a wait
    beyond the gateway's longest is its longest; the session has news at once."""
    session = new_session(http, token)
    answer = http.post("/rpc/session_changes", json={"p_session_id": session},
                       headers={**bearer(token), "Prefer": f"wait={HUGE}"})
    assert answer.status_code == 200, answer.text[:300]


@pytest.mark.parametrize("parts", [257, 2_048])
def test_an_upload_path_too_deep_is_400_22023(http: httpx.Client, token: str,
                                             parts: int) -> None:
    """2,048 one-letter parts are 4,095 bytes, within the length bound: the
    recursive put of each directory exhausted PostgreSQL's stack (a 500)."""
    session = new_session(http, token)
    path = "/".join(["a"] * parts)
    for fn, args in (("upload_file", {"p_content": "\\x00"}), ("read_file", {})):
        answer = rpc(http, fn, token, p_session_id=session, p_path=path, **args)
        assert answer.status_code == 400, answer.text[:300]
        assert error(answer) == {
            "code": "22023", "message": f"path is too deep ({parts} parts)",
            "details": "A path may have at most 256 parts (directories and the file's name).",
            "hint": "Give a path with fewer directories."}


def test_an_upload_path_256_deep_is_stored_and_read(http: httpx.Client, token: str) -> None:
    session = new_session(http, token)
    path = "/".join(["d"] * 255 + ["f"])
    upload = rpc(http, "upload_file", token, p_session_id=session, p_path=path,
                 p_content="\\x2a")
    assert upload.status_code == 200, upload.text[:300]
    read = rpc(http, "read_file", token, p_session_id=session, p_path=path)
    assert (read.status_code, read.json()) == (200, "\\x2a")


# Grammar values at and past the bounds: logic trees nested up to 2,000 deep,
# numbers up to 6,000 digits, Ranges made of them.
numbers = st.one_of(st.integers(min_value=0, max_value=2**64).map(str),
                    st.integers(min_value=1, max_value=6_000).map(lambda n: "9" * n))
trees = st.builds(nested_logic, st.integers(min_value=1, max_value=2_000),
                  st.sampled_from(["or", "and", "not.or", "not.and"]))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=numbers, offset=numbers, tree=trees, first=numbers, last=numbers | st.just(""),
       prefer_wait=numbers)
def test_generated_bounds_get_a_400_or_an_answer(http: httpx.Client, token: str, limit: str,
                                                 offset: str, tree: str, first: str, last: str,
                                                 prefer_wait: str) -> None:
    for params, headers in (({"limit": limit}, {}), ({"offset": offset}, {}), ({"or": tree}, {}),
                            ({}, {"Range": f"{first}-{last}"}),
                            ({}, {"Prefer": f"wait={prefer_wait}"})):
        answer = http.get("/rpc/list_sessions", params=params, headers={**bearer(token), **headers})
        assert answer.status_code in (200, 206, 400, 416), (params, headers, answer.text[:300])
        if answer.status_code == 400:
            assert error(answer)["code"] == "PGRST100"
