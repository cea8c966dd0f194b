"""Bounded answers and the live feed under attack, against the real gateway
(`pg-shell serve`) and database: a huge listing, pages cut by the byte
budget, abandoned, capped and far-future long-polls, and (with the real
executor and engine) what 200 abandoned long-polls cost a streaming command."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.db.api_helpers import append, claim, run, start, superuser_rows
from tests.fixtures_stack import Daemon, Gateway
from tests.gateway.api import PASSWORD, bearer, new_session, rpc
from tests.support import create_user, one, tenant, wait_for

MIB = 1024 * 1024
LINE = "\x01\x02\x1b[31mé€" + "x" * 20 + "\x07\n"  # control bytes cost six as JSON


@pytest.fixture
def start_gateway(db: str, tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    started: list[Gateway] = []

    def start_(**settings: str) -> Gateway:
        gw = Gateway(db, tmp_path / f"gateway-{len(started)}.log").start(**settings)
        started.append(gw)
        return gw

    yield start_
    for gw in started:
        gw.stop()


def login(url: str, username: str = "alice") -> str:
    answer = httpx.post(f"{url}/rpc/login", json={"p_username": username, "p_password": PASSWORD})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])


def peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


def test_a_latest_output_over_24_outputs_of_1_mib_is_bounded_in_bytes_and_memory(
        db: str, start_gateway: Callable[..., Gateway]) -> None:
    alice = create_user(db, "alice")
    conn = tenant(db, alice)
    session = one(conn, "SELECT shell_api.create_session('big')")
    outputs = {}
    for i in range(24):
        command_id = one(conn, "SELECT shell_api.submit_command(%s, %s)", (session, f"big {i}"))
        outputs[command_id] = (LINE * (MIB // len(LINE.encode()) + 1)).encode()[:MIB].decode(
            "utf-8", "ignore")
        run(db, command_id, outputs[command_id])
    gw = start_gateway()
    token = login(gw.url)
    assert gw.proc is not None
    before = peak_rss_mb(gw.proc.pid)

    with httpx.Client(base_url=gw.url, timeout=60) as http:
        answer = rpc(http, "latest_output", token, p_session_id=session, p_limit=24)
        html = http.post("/rpc/latest_output_html", json={"p_session_id": session, "p_limit": 24},
                         headers={**bearer(token), "Accept": "text/html"})
        rows = answer.json()
        # The rest of one output, through read_output's pages.
        newest = rows[-1]
        rest = rpc(http, "read_output", token, p_command_id=newest["id"],
                   p_offset=len(newest["output"].encode()))

    after = peak_rss_mb(gw.proc.pid)
    assert answer.status_code == 200, answer.text
    assert len(answer.content) <= 4 * MIB, len(answer.content)
    assert len(html.content) <= 4 * MIB, len(html.content)
    assert after < 200, (before, after)
    assert [r["id"] for r in rows] == sorted(outputs)
    assert all(r["output_cut"] and r["output_bytes"] == MIB for r in rows)
    # Non-ASCII travels as UTF-8 (é is two bytes, not six).
    assert "é".encode() in answer.content and b"\\u00e9" not in answer.content
    assert rest.status_code == 200, rest.text
    assert newest["output"] + rest.json()[0]["output"] == outputs[newest["id"]]
    assert rest.json()[0]["next_offset"] == MIB


def test_a_page_past_the_byte_budget_stops_at_a_row_and_continues_by_range(
        db: str, start_gateway: Callable[..., Gateway]) -> None:
    alice = create_user(db, "alice")
    conn = tenant(db, alice)
    session = one(conn, "SELECT shell_api.create_session('chunks')")
    command_id = one(conn, "SELECT shell_api.submit_command(%s, 'chunky')", (session,))
    attempt = claim(db, command_id)
    start(db, command_id, attempt)
    chunks = [f"{i:04d}" + "y" * 9995 + "\n" for i in range(60)]  # 60 rows of 10 kB
    for seq, data in enumerate(chunks):
        append(db, command_id, attempt, seq, data)
    gw = start_gateway(PG_SHELL_RESPONSE_BUDGET_BYTES=str(128 * 1024))
    token = login(gw.url)

    got: list[str] = []
    with httpx.Client(base_url=gw.url, timeout=60) as http:
        while True:
            answer = http.get("/rpc/output_timeline", params={"p_command_id": command_id},
                              headers={**bearer(token), "Range": f"{len(got)}-",
                                       "Prefer": "count=exact"})
            assert answer.status_code in (200, 206), answer.text
            assert len(answer.content) <= 128 * 1024
            first, last, total = re.fullmatch(r"(\d+)-(\d+)/(\d+)",
                                              answer.headers["content-range"]).groups()
            assert (int(first), int(total)) == (len(got), 60)  # the whole result's size
            rows = answer.json()
            got += [r["data"] for r in rows]
            assert int(last) == len(got) - 1
            if len(got) == 60:
                break
            assert answer.status_code == 206 and len(rows) < 60 - int(first)
    assert got == chunks


def long_poll(url: str, token: str, session: str, after: int = 0, wait: int = 20
              ) -> socket.socket:
    """A long-poll sent on a raw connection, left for the caller to read or abandon."""
    sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    sock.sendall((f"GET /rpc/session_changes?p_session_id={session}&p_after_change={after} "
                  f"HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                  f"Prefer: wait={wait}\r\nAccept: application/json\r\n\r\n").encode())
    return sock


def capped(http: httpx.Client, token: str, session: str) -> httpx.Response:
    return http.get("/rpc/session_changes", params={"p_session_id": session, "p_after_change": 10},
                    headers={**bearer(token), "Prefer": "wait=1"})


def test_waiters_are_capped_per_user_and_overall_and_a_closed_one_frees_its_place(
        db: str, start_gateway: Callable[..., Gateway]) -> None:
    for name in ("alice", "bob"):
        create_user(db, name)
    gw = start_gateway(PG_SHELL_LONG_POLLS="3", PG_SHELL_LONG_POLLS_PER_USER="2")
    alice, bob = login(gw.url, "alice"), login(gw.url, "bob")
    with httpx.Client(base_url=gw.url, timeout=30) as http:
        a_session, b_session = new_session(http, alice), new_session(http, bob)
        held = [long_poll(gw.url, alice, a_session), long_poll(gw.url, alice, a_session)]
        time.sleep(1)  # both are in and waiting
        refused = wait_for("alice's third long-poll refused",
                           lambda: (r := capped(http, alice, a_session)).status_code == 429 and r)
        assert refused.headers["retry-after"] == "2"
        assert refused.json()["code"] == "PT429"
        assert refused.json()["hint"] == "Try again in 2 seconds."
        # Bob still has the third place overall …
        bob_held = long_poll(gw.url, bob, b_session)
        time.sleep(1)
        # … and then the gateway is full, for him too.
        assert wait_for("bob refused", lambda: capped(http, bob, b_session).status_code == 429)
        # A long-poll whose client went away ends: its place is free again.
        for sock in held:
            sock.close()
        assert wait_for("alice admitted again",
                        lambda: capped(http, alice, a_session).status_code == 200, timeout=10)
        bob_held.close()


def test_a_cursor_from_the_future_is_clamped_and_the_poll_ends_at_the_next_change(
        db: str, gateway: Gateway) -> None:
    create_user(db, "alice")
    token = login(gateway.url)
    answers: list[httpx.Response] = []
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        session = new_session(http, token)
        poll = threading.Thread(target=lambda: answers.append(http.get(
            "/rpc/session_changes",
            params={"p_session_id": session, "p_after_change": 10 ** 15, "p_tail": "true"},
            headers={**bearer(token), "Prefer": "wait=20"})))
        poll.start()
        time.sleep(1)  # the poll is waiting (an early answer would be empty: asserted below)
        command_id = rpc(http, "submit_command", token, p_session_id=session,
                         p_command="echo later").json()
        poll.join(30)
    assert [(r["id"], r["status"]) for r in answers[0].json()] == [(command_id, "pending")]


def xact_commits(db: str) -> int:
    return int(superuser_rows(db, "SELECT xact_commit FROM pg_stat_database"
                                  " WHERE datname = current_database()")[0]["xact_commit"])


def test_200_abandoned_long_polls_cost_a_streaming_command_nothing(
        db: str, daemon: Daemon, start_gateway: Callable[..., Gateway]) -> None:
    create_user(db, "alice")
    gw = start_gateway(PG_SHELL_LONG_POLLS="500", PG_SHELL_LONG_POLLS_PER_USER="500")
    token = login(gw.url)
    with httpx.Client(base_url=gw.url, timeout=60) as http:
        session = new_session(http, token)
        cursor = int(rpc(http, "session_cursor", token, p_session_id=session).json())
        polls = [long_poll(gw.url, token, session, cursor) for _ in range(200)]
        time.sleep(2)  # all of them are in
        for sock in polls:
            sock.close()
        time.sleep(1)
        before = xact_commits(db)
        command_id = rpc(http, "submit_command", token, p_session_id=session,
                         p_command="for i in $(seq 40); do echo $i; sleep 0.05; done").json()
        wait_for("the command", lambda: superuser_rows(
            db, "SELECT status FROM shell.commands WHERE id = %s AND status = 'done'",
            (command_id,)))
        spent = xact_commits(db) - before
    # About 2,300 before the feed's rewrite; the executor alone needs a few
    # hundred (claims, heartbeats, output, completion, its polling).
    assert spent < 600, spent

