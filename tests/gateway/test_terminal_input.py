"""Input to terminal commands over HTTP (DESIGN.md §13), attacked as a
tenant would on the real gateway: a flood gets 429 with Retry-After and
every input that was accepted is kept, in order; input to a command that
takes none, or to another tenant's command, is refused."""

from __future__ import annotations

import httpx
import psycopg2
import pytest

from tests.gateway.api import PASSWORD, error, new_session, rpc
from tests.gateway.test_files_quota import set_user
from tests.support import call, create_user

pytestmark = pytest.mark.postgres


def terminal(http: httpx.Client, token: str) -> int:
    answer = rpc(http, "submit_command", token, p_session_id=new_session(http, token),
                 p_command="cat", p_tty=True, p_cols=80, p_rows=24)
    assert answer.status_code == 200, answer.text
    return int(answer.json())


def test_an_input_flood_is_refused_with_retry_after_and_nothing_accepted_is_lost(
        http: httpx.Client, token: str, db: str) -> None:
    set_user(db, "max_inputs_per_second", 2)
    command_id = terminal(http, token)
    accepted: list[str] = []
    refused = None
    for n in range(500):  # a liveness bound: the limit is hit long before, however slow the host
        answer = rpc(http, "send_input", token, p_command_id=command_id, p_data=f"k{n}")
        if answer.status_code == 429:
            refused = answer
            break
        assert answer.status_code == 200, answer.text
        accepted.append(f"k{n}")
    assert refused is not None and refused.headers["Retry-After"] == "1"
    assert error(refused)["code"] == "PT429"
    conn = psycopg2.connect(db)
    try:
        stored = call(conn, "SELECT data FROM shell.command_input WHERE command_id = %s "
                      "ORDER BY seq", (command_id,))
    finally:
        conn.close()
    assert [r["data"] for r in stored] == accepted


def test_input_that_cannot_be_taken_is_refused_clearly(http: httpx.Client, token: str,
                                                        db: str) -> None:
    session = new_session(http, token)
    plain = int(rpc(http, "submit_command", token, p_session_id=session,
                    p_command="sleep 1").json())
    answer = rpc(http, "send_input", token, p_command_id=plain, p_data="x")
    assert (answer.status_code, error(answer)["code"]) == (409, "PT409")
    assert "p_tty" in error(answer)["hint"]
    command_id = terminal(http, token)
    too_big = rpc(http, "send_input", token, p_command_id=command_id, p_data="x" * 65537)
    assert (too_big.status_code, error(too_big)["code"]) == (400, "22023")
    assert "65536" in error(too_big)["details"]
    nul = rpc(http, "send_input", token, p_command_id=command_id, p_data="a\x00b")
    assert nul.status_code == 400
    window = rpc(http, "resize_terminal", token, p_command_id=command_id, p_cols=1001, p_rows=5)
    assert (window.status_code, error(window)["code"]) == (400, "22023")
    create_user(db, "mallory")
    other = http.post("/rpc/login", json={"p_username": "mallory", "p_password": PASSWORD})
    foreign = rpc(http, "send_input", str(other.json()["token"]), p_command_id=command_id,
                  p_data="x")
    assert (foreign.status_code, error(foreign)["message"]) == (400, "command not found")
