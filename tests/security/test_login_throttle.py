"""Login throttling: per username in the database (so it holds behind
PostgREST too), with exponential back-off, 429 and Retry-After through
PostgREST's response.status / response.headers settings; per client address
in the gateway. A guesser cannot keep the real user out longer than the
back-off, and cannot tell known names from unknown ones by being throttled.
Attempts on one name are taken one at a time, so parallel guesses get no
more password checks than sequential ones; the client's address is the
connection's unless a configured proxy forwarded it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg2
import pytest

from tests.fixtures_stack import Gateway
from tests.support import call, connect_as, create_user, one

pytestmark = pytest.mark.postgres

PASSWORD = "correct horse"
CONF = Path(__file__).resolve().parents[2] / "ops" / "postgrest" / "postgrest.conf"


def configure(db: str, free: int, base_s: float, max_s: float) -> None:
    conn = psycopg2.connect(db)
    conn.autocommit = True
    try:
        for key, value in (("login_free_failures", free), ("login_backoff_base_s", base_s),
                           ("login_backoff_max_s", max_s)):
            call(conn, "UPDATE shell.config SET value = %s WHERE key = %s", (str(value), key))
    finally:
        conn.close()


def failures(db: str, name: str) -> list[dict[str, object]]:
    conn = psycopg2.connect(db)
    try:
        return call(conn, "SELECT failures, extract(epoch FROM closed_until - last_failure)::float"
                          " AS closed_s FROM shell.login_failures WHERE username = %s", (name,))
    finally:
        conn.close()


def login_in_sql(db: str, username: str, password: str) -> tuple[dict[str, object], str, str]:
    """login() as PostgREST calls it (shell_anon, one transaction): its answer
    and the response.status / response.headers it leaves, read before commit."""
    conn = connect_as(db, "shell_anon")
    try:
        conn.autocommit = False
        answer = one(conn, "SELECT shell_api.login(%s, %s)", (username, password))
        status = one(conn, "SELECT current_setting('response.status', true)")
        headers = one(conn, "SELECT current_setting('response.headers', true)")
        conn.commit()
        return answer, status, headers
    finally:
        conn.close()


def test_a_failed_login_is_recorded_and_answered_403_without_raising(db: str) -> None:
    create_user(db, "alice")
    answer, status, headers = login_in_sql(db, "alice", "wrong horse")
    assert answer == {"code": "28P01", "message": "invalid username or password",
                      "details": None, "hint": None}
    assert (status, json.loads(headers)) == ("403", [])
    assert failures(db, "alice") == [{"failures": 1, "closed_s": 0.0}]  # committed: not rolled back
    unknown = login_in_sql(db, "nobody", "wrong horse")
    assert unknown == (answer, status, headers)  # names cannot be probed
    token, status, _ = login_in_sql(db, "alice", PASSWORD)
    assert set(token) == {"token"} and not status
    assert failures(db, "alice") == []  # a success clears the count


def test_the_back_off_doubles_up_to_its_cap(db: str) -> None:
    configure(db, free=2, base_s=1, max_s=4)
    conn = psycopg2.connect(db)
    conn.autocommit = True
    closed = []
    try:
        for _ in range(6):
            call(conn, "SELECT shell.record_login_failure('mallory')")
            closed.append(failures(db, "mallory")[0]["closed_s"])
    finally:
        conn.close()
    assert closed == [0.0, 0.0, 1.0, 2.0, 4.0, 4.0]


def test_a_throttled_name_answers_429_with_retry_after_in_sql(db: str) -> None:
    create_user(db, "alice")
    configure(db, free=1, base_s=30, max_s=60)
    login_in_sql(db, "alice", "guess 1")
    login_in_sql(db, "alice", "guess 2")  # closes the name for 30 s
    answer, status, headers = login_in_sql(db, "alice", PASSWORD)  # even the right one waits
    assert status == "429"
    assert answer["code"] == "PT429"
    assert answer["message"] == "too many failed logins for this username"
    [retry] = json.loads(headers)
    assert set(retry) == {"Retry-After"} and 1 <= int(retry["Retry-After"]) <= 30
    assert failures(db, "alice")[0]["failures"] == 2  # refused unchecked: no bcrypt, no count


@pytest.fixture
def http(gateway: Gateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        yield client


def test_through_the_gateway_a_guesser_gets_429_and_the_user_gets_in_after_the_back_off(
        db: str, http: httpx.Client) -> None:
    create_user(db, "alice")
    configure(db, free=3, base_s=1, max_s=2)
    for n in range(4):
        guess = http.post("/rpc/login", json={"p_username": "alice", "p_password": f"guess {n}"})
        assert guess.status_code == 403, guess.text
        assert guess.json()["code"] == "28P01"
    throttled = http.post("/rpc/login", json={"p_username": "alice", "p_password": PASSWORD})
    assert throttled.status_code == 429
    assert throttled.json()["code"] == "PT429"
    wait_s = int(throttled.headers["Retry-After"])
    assert wait_s >= 1
    nobody = http.post("/rpc/login", json={"p_username": "bob", "p_password": PASSWORD})
    assert nobody.status_code == 403  # other names are not affected
    time.sleep(wait_s)
    admitted = http.post("/rpc/login", json={"p_username": "alice", "p_password": PASSWORD})
    assert admitted.status_code == 200, admitted.text
    assert set(admitted.json()) == {"token"}
    assert failures(db, "alice") == []


@pytest.fixture
def strict_gateway(db: str, tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(db, tmp_path / "gateway.log").start(PG_SHELL_LOGIN_ATTEMPTS_PER_MINUTE="3")
    yield gw
    gw.stop()


def test_the_gateway_throttles_logins_per_client_address(db: str, strict_gateway: Gateway) -> None:
    create_user(db, "alice")
    with httpx.Client(base_url=strict_gateway.url, timeout=30) as http:
        names = ["carol", "dave", "erin"]  # different names: the database's throttle stays out
        for name in names:
            assert http.post("/rpc/login", json={"p_username": name, "p_password": "x"}
                             ).status_code == 403
        refused = http.post("/rpc/login", json={"p_username": "alice", "p_password": PASSWORD})
        assert refused.status_code == 429
        assert refused.json()["code"] == "PT429"
        assert refused.json()["message"] == "too many logins from this address"
        assert 1 <= int(refused.headers["Retry-After"]) <= 20
        assert http.post("/rpc/list_sessions").status_code == 401  # other calls go on
    for name in names:
        assert failures(db, name) == [{"failures": 1, "closed_s": 0.0}]


def test_postgrest_honours_the_same_answer() -> None:
    """PostgREST (12+, as postgrest.conf requires) sends response.status and
    response.headers as the status and headers, and applies the impersonated
    role's settings; the conf keeps the anonymous role that may call login."""
    text = CONF.read_text()
    assert "PostgREST (12 or newer)" in text
    assert 'db-anon-role = "shell_anon"' in text


def parallel_logins(url: str, username: str, passwords: list[str]) -> list[int]:
    """The statuses of logins sent at once, each on its own connection."""
    start = threading.Barrier(len(passwords))

    def attempt(password: str) -> int:
        with httpx.Client(base_url=url, timeout=60) as http:
            start.wait()
            answer = http.post("/rpc/login",
                               json={"p_username": username, "p_password": password})
            return answer.status_code
    with ThreadPoolExecutor(len(passwords)) as pool:
        return sorted(pool.map(attempt, passwords))


@pytest.mark.parametrize("username", ["alice", "nobody"])
def test_parallel_guesses_get_no_more_password_checks_than_sequential_ones(
        db: str, gateway: Gateway, username: str) -> None:
    """Ten wrong passwords at once: the five free failures and the one that
    closes the name are checked (each recorded as a failure), the other four
    wait their turn and find the name closed. A window of 300 s: no attempt
    can outlast it, so the count does not depend on the machine's speed."""
    create_user(db, "alice")
    configure(db, free=5, base_s=300, max_s=300)
    statuses = parallel_logins(gateway.url, username, [f"guess {n}" for n in range(10)])
    assert statuses == [403] * 6 + [429] * 4
    assert failures(db, username) == [{"failures": 6, "closed_s": 300.0}]
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        closed = http.post("/rpc/login", json={"p_username": username, "p_password": PASSWORD})
    assert closed.status_code == 429
    assert failures(db, username)[0]["failures"] == 6


def test_a_spoofed_forwarded_address_does_not_buy_a_fresh_limit(
        db: str, strict_gateway: Gateway) -> None:
    """No proxy is configured: a client on the same host as the gateway (a
    loopback connection) that sends X-Forwarded-For is still counted as itself."""
    with httpx.Client(base_url=strict_gateway.url, timeout=30) as http:
        statuses = [http.post("/rpc/login", json={"p_username": f"name{n}", "p_password": "x"},
                              headers={"X-Forwarded-For": f"192.0.2.{n + 1}"}).status_code
                    for n in range(4)]
        plain = http.post("/rpc/login", json={"p_username": "name9", "p_password": "x"})
    assert statuses == [403, 403, 403, 429]
    assert plain.status_code == 429


@pytest.fixture
def proxied_gateway(db: str, tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(db, tmp_path / "gateway.log").start(PG_SHELL_LOGIN_ATTEMPTS_PER_MINUTE="3",
                                                     PG_SHELL_TRUSTED_PROXIES="127.0.0.1")
    yield gw
    gw.stop()


def test_behind_a_configured_proxy_the_forwarded_address_is_counted(
        db: str, proxied_gateway: Gateway) -> None:
    """The proxy at 127.0.0.1 is trusted: each client it forwards has its own
    limit, and a client's own claim in front of the proxy's entry is not
    believed (the nearest address the proxy did not write is)."""
    def login(http: httpx.Client, forwarded_for: str, n: int) -> int:
        return http.post("/rpc/login", json={"p_username": f"name{n}", "p_password": "x"},
                         headers={"X-Forwarded-For": forwarded_for}).status_code
    with httpx.Client(base_url=proxied_gateway.url, timeout=30) as http:
        first = [login(http, "192.0.2.7", n) for n in range(4)]
        claimed = [login(http, f"198.51.100.{n}, 192.0.2.7", n) for n in range(2)]
        second = [login(http, "192.0.2.8", n) for n in range(4)]
    assert first == [403, 403, 403, 429]
    assert claimed == [429, 429]
    assert second == [403, 403, 403, 429]
