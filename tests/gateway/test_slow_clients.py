"""Connections: a half-sent request is dropped within 30 s (header timeout,
idle timeout while a body stalls, minimum rate while it trickles), connections are capped with 503
beyond the cap, and HEAD runs read-only functions only. Attacked on the real
gateway with bare sockets; the times measured are printed, not asserted
(bench/gateway_abuse.py reports them)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures_stack import Gateway
from tests.gateway.api import bearer, new_session, rpc
from tests.gateway.raw_http import closed_within, trickled_until_closed

pytestmark = pytest.mark.postgres

PROMISE_S = 30  # DESIGN §11: half-sent requests are dropped within 30 s


def test_a_request_whose_headers_never_end_is_closed(gateway: Gateway) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.sendall(b"POST /rpc/login HTTP/1.1\r\nHost: x\r\n")
        waited = closed_within(sock, PROMISE_S)
    assert waited is not None, "the half-sent request was still open after 30 s"
    print(f"half-sent headers dropped after {waited:.1f} s")


def test_trickling_header_bytes_does_not_extend_the_deadline(gateway: Gateway) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.sendall(b"POST /rpc/login HTTP/1.1\r\n")
        waited = trickled_until_closed(sock, b"X-Slow: 1\r\n", PROMISE_S)
    assert waited is not None, "a client trickling header lines kept its connection for 30 s"
    print(f"trickling client dropped after {waited:.1f} s")


def test_a_stalled_body_is_closed(gateway: Gateway) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.sendall(b"POST /rpc/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"p_user")
        waited = closed_within(sock, PROMISE_S)
    assert waited is not None, "the stalled body was still open after 30 s"
    print(f"stalled body dropped after {waited:.1f} s")


def test_a_body_trickled_a_byte_at_a_time_is_closed(gateway: Gateway) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.sendall(b"POST /rpc/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n")
        waited = trickled_until_closed(sock, b" ", PROMISE_S)  # far below the minimum body rate
    assert waited is not None, "a body sent a byte a second kept its connection for 30 s"
    print(f"trickled body dropped after {waited:.1f} s")


def test_a_complete_request_is_answered_however_long_it_takes(
        http: httpx.Client, token: str) -> None:
    session = new_session(http, token)
    # Nothing changes: the long-poll is held past both timeouts (10 s) and answered.
    answer = http.post("/rpc/session_changes", json={"p_session_id": session},
                       headers={**bearer(token), "Prefer": "wait=12"})
    assert answer.status_code == 200, answer.text


@pytest.fixture
def capped_gateway(db: str, tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(db, tmp_path / "gateway.log").start(PG_SHELL_MAX_CONNECTIONS="4")
    yield gw
    gw.stop()


def test_connections_beyond_the_cap_get_503(capped_gateway: Gateway) -> None:
    holders = [socket.create_connection(("127.0.0.1", capped_gateway.port)) for _ in range(4)]
    try:
        with httpx.Client(base_url=capped_gateway.url, timeout=10) as http:
            refused = http.get("/rpc/login")
        assert refused.status_code == 503
    finally:
        for sock in holders:
            sock.close()
    deadline = time.monotonic() + PROMISE_S
    status = 503
    while status == 503 and time.monotonic() < deadline:
        with httpx.Client(base_url=capped_gateway.url, timeout=10) as http:
            status = http.post("/rpc/login", json={"p_username": "x", "p_password": "y"}
                               ).status_code
        time.sleep(0.1)
    assert status == 403  # served again once the holders left


def test_head_runs_no_function_that_writes(http: httpx.Client, token: str) -> None:
    head = http.head("/rpc/create_session", headers=bearer(token))
    assert head.status_code == 405
    listed = rpc(http, "list_sessions", token)
    assert listed.json() == []
    read = http.head("/rpc/list_sessions", headers=bearer(token))
    assert read.status_code == 200
    assert read.content == b""
