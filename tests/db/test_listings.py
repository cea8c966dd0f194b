"""Listings within a byte budget, with cursors to continue (0014_listings_live):
huge outputs, read_output's pages, load earlier, the feed's tails, the
clamped cursor and coalesced notifications. Each test attacks the bound it
names, as a tenant through shell_api (SET ROLE plus JWT claims)."""

from __future__ import annotations

import json

import pytest

from tests.db.api_helpers import (
    WORKER,
    append,
    claim,
    complete,
    listener,
    notifications,
    run,
    sqlstate,
    start,
)
from tests.support import call, create_user, executor, one, tenant

MIB = 1024 * 1024
BUDGET = 3 * MIB  # shell.listing_budget()'s default
# Control bytes cost six bytes each as JSON, non-ASCII two to four as UTF-8.
NASTY_LINE = "\x01\x02\x1b[31mé€" + "x" * 20 + "\x07\n"


def nasty_output(size: int) -> str:
    text = NASTY_LINE * (size // len(NASTY_LINE.encode()) + 1)
    return text.encode()[:size].decode("utf-8", "ignore")


@pytest.fixture
def alice(db: str) -> tuple[str, object]:
    user = create_user(db, "alice")
    return user, tenant(db, user)


def submit(conn: object, session: str, command: str) -> int:
    return int(one(conn, "SELECT shell_api.submit_command(%s, %s)", (session, command)))


def new_session(conn: object) -> str:
    return str(one(conn, "SELECT shell_api.create_session('s')"))


def read_all(conn: object, command_id: int, limit: int = 300_000) -> str:
    """The whole output through read_output's pages."""
    text, offset = "", 0
    while True:
        page = call(conn, "SELECT * FROM shell_api.read_output(%s, %s, %s)",
                    (command_id, offset, limit))[0]
        assert page["output_offset"] == offset
        assert page["next_offset"] == offset + len(page["output"].encode())
        text += page["output"]
        if page["next_offset"] == page["output_bytes"]:
            return text
        assert page["next_offset"] > offset
        offset = page["next_offset"]


def test_a_listing_of_24_outputs_of_1_mib_stays_within_the_budget_and_read_output_gives_all(
        db: str, alice: tuple[str, object]) -> None:
    _user, conn = alice
    session = new_session(conn)
    outputs = {}
    for i in range(24):
        command_id = submit(conn, session, f"make {i}")
        outputs[command_id] = nasty_output(MIB - i)
        run(db, command_id, outputs[command_id])

    rows = call(conn, "SELECT * FROM shell_api.latest_output(%s, 0, 24)", (session,))

    assert [r["id"] for r in rows] == sorted(outputs)
    as_json = json.dumps(rows, default=str, ensure_ascii=False).encode()
    assert len(as_json) <= BUDGET + 24 * 1024, len(as_json)
    for r in rows:
        full = outputs[r["id"]].encode()
        assert r["output_bytes"] == len(full)
        assert r["output_offset"] == 0
        assert r["output_cut"] is True
        assert full.startswith(r["output"].encode())
        assert len(r["output"].encode()) <= 65536
    # The budget goes to the newest first: they carry output, the oldest may not.
    assert rows[-1]["output"] != ""
    # The rest of every output is there, page by page.
    newest, oldest = rows[-1]["id"], rows[0]["id"]
    assert read_all(conn, newest) == outputs[newest]
    assert read_all(conn, oldest, limit=MIB) == outputs[oldest]

    html = one(conn, "SELECT shell_api.latest_output_html(%s, 0, 24)", (session,))
    assert len(html.encode()) <= BUDGET + 24 * 4096, len(html.encode())
    assert html.count('class="cut"') == 24
    assert f'data-bytes="{len(outputs[newest].encode())}"' in html


def test_read_output_refuses_bad_offsets_and_limits_and_other_tenants(
        db: str, alice: tuple[str, object]) -> None:
    _user, conn = alice
    session = new_session(conn)
    command_id = submit(conn, session, "echo é")
    run(db, command_id, "aé\n")  # é is two bytes: offset 2 is inside it

    page = call(conn, "SELECT * FROM shell_api.read_output(%s)", (command_id,))
    assert page == [{"command_id": command_id, "output_offset": 0, "output": "aé\n",
                     "next_offset": 4, "output_bytes": 4, "status": "done"}]
    assert call(conn, "SELECT output, next_offset FROM shell_api.read_output(%s, 4)",
                (command_id,)) == [{"output": "", "next_offset": 4}]
    # A limit inside a character still gives that character whole.
    assert call(conn, "SELECT output, next_offset FROM shell_api.read_output(%s, 1, 1)",
                (command_id,)) == [{"output": "é", "next_offset": 3}]
    for offset, limit in ((-1, 10), (5, 10), (2, 10), (0, 0), (0, -5), (0, 4 * MIB)):
        code, message = sqlstate(conn, "SELECT * FROM shell_api.read_output(%s, %s, %s)",
                                 (command_id, offset, limit))
        assert code == "22023", (offset, limit, message)
    assert sqlstate(conn, "SELECT * FROM shell_api.read_output(%s, NULL)",
                    (command_id,))[0] == "22023"

    bob = tenant(db, create_user(db, "bob"))
    assert sqlstate(bob, "SELECT * FROM shell_api.read_output(%s)", (command_id,)) == (
        "22023", "command not found")


def test_load_earlier_pages_reach_the_whole_history_without_gaps_or_repeats(
        db: str, alice: tuple[str, object]) -> None:
    _user, conn = alice
    session = new_session(conn)
    ids = [submit(conn, session, f"echo {i}") for i in range(45)]

    seen: list[int] = []
    before = None
    while True:
        page = call(conn, "SELECT id, command FROM shell_api.latest_output(%s, 0, 10, %s)",
                    (session, before))
        if not page:
            break
        assert [r["id"] for r in page] == sorted(r["id"] for r in page)
        seen = [r["id"] for r in page] + seen
        before = page[0]["id"]
    assert seen == ids
    # p_output_limit 0: the commands alone (↑ history), all marked as cut where
    # they have output.
    rows = call(conn, "SELECT command, output, output_cut FROM shell_api.latest_output("
                      "%s, 0, 1000, NULL, 0)", (session,))
    assert [r["command"] for r in rows] == [f"echo {i}" for i in range(45)]
    assert {r["output"] for r in rows} == {""}
    for args in ((session, 0, 10, 0, 100), (session, 0, 10, None, -1),
                 (session, 0, 10, None, 4 * MIB)):
        assert sqlstate(conn, "SELECT * FROM shell_api.latest_output(%s, %s, %s, %s, %s)",
                        args)[0] == "22023"


def test_the_feed_tail_sends_only_output_after_the_cursor(
        db: str, alice: tuple[str, object]) -> None:
    _user, conn = alice
    session = new_session(conn)
    command_id = submit(conn, session, "stream")
    attempt = claim(db, command_id)
    start(db, command_id, attempt)
    append(db, command_id, attempt, 0, "one é\n")
    cursor = int(one(conn, "SELECT shell_api.session_cursor(%s)", (session,)))
    append(db, command_id, attempt, 1, "two\n")
    append(db, command_id, attempt, 2, "three\n")

    rows = call(conn, "SELECT output, output_offset, output_bytes, output_cut, change_seq"
                      " FROM shell_api.session_changes(%s, %s, 100, true)", (session, cursor))
    assert len(rows) == 1
    assert rows[0]["output"] == "two\nthree\n"
    assert rows[0]["output_offset"] == len("one é\n".encode())
    assert rows[0]["output_bytes"] == len("one é\ntwo\nthree\n".encode())
    assert rows[0]["output_cut"] is False
    # Without p_tail, the whole output as before.
    assert one(conn, "SELECT output FROM shell_api.session_changes(%s, %s)",
               (session, cursor)) == "one é\ntwo\nthree\n"
    # Completing sends no output again.
    cursor = rows[0]["change_seq"]
    complete(db, command_id, attempt)
    done = call(conn, "SELECT status, output, output_offset FROM shell_api.session_changes("
                      "%s, %s, 100, true)", (session, cursor))
    assert done == [{"status": "done", "output": "",
                     "output_offset": len("one é\ntwo\nthree\n".encode())}]
    html = one(conn, "SELECT shell_api.session_changes_html(%s, %s, 100, true)", (session, cursor))
    assert 'data-from="17" data-end="17" data-bytes="17"' in html
    assert 'class="cut"' not in html


def test_a_cursor_from_the_future_is_clamped_to_the_newest_change(
        db: str, alice: tuple[str, object]) -> None:
    _user, conn = alice
    session = new_session(conn)
    command_id = submit(conn, session, "stream")
    attempt = claim(db, command_id)
    start(db, command_id, attempt)
    append(db, command_id, attempt, 0, "early\n")
    far = 10 ** 15
    # Nothing is after the newest change, and a tail from "the future" starts
    # where the output stands now (the gateway's long-poll then waits from
    # session_cursor, tests/gateway/test_live.py).
    assert call(conn, "SELECT id FROM shell_api.session_changes(%s, %s, 100, true)",
                (session, far)) == []
    current = int(one(conn, "SELECT shell_api.session_cursor(%s)", (session,)))
    append(db, command_id, attempt, 1, "late\n")
    assert call(conn, "SELECT output, output_offset FROM shell_api.session_changes("
                      "%s, %s, 100, true)", (session, current)) == [
        {"output": "late\n", "output_offset": 6}]


def test_output_appended_quietly_is_announced_once(db: str, alice: tuple[str, object]) -> None:
    _user, conn = alice
    session = new_session(conn)
    command_id = submit(conn, session, "stream")
    attempt = claim(db, command_id)
    start(db, command_id, attempt)
    listen = listener(db, "shell_changes")
    ex = executor(db)
    try:
        for seq in range(5):
            call(ex, "SELECT shell.append_output(%s, %s, %s, %s, %s, false)",
                 (command_id, WORKER, attempt, seq, f"line {seq}\n"))
        assert notifications(listen, 0, timeout=0.3) == []
        cursor_moved = call(conn, "SELECT change_seq FROM shell_api.session_changes(%s, 0)",
                            (session,))
        assert len(cursor_moved) == 1
        call(ex, "SELECT shell.announce_output(%s, %s, %s)", (command_id, WORKER, attempt))
        assert notifications(listen, 1) == [("shell_changes", session)]
        call(ex, "SELECT shell.append_output(%s, %s, %s, 5, 'loud')",
             (command_id, WORKER, attempt))
        assert notifications(listen, 1) == [("shell_changes", session)]
        # Announcing needs the lease.
        assert sqlstate(ex, "SELECT shell.announce_output(%s, 'someone-else', %s)",
                        (command_id, attempt))[0] == "PS001"
    finally:
        ex.close()
        listen.close()
