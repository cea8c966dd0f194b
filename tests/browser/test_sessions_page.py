"""Sessions, replay and signing in as a person expects them (issue 13:
rename and archive, lineage both ways, replay beside the original, one
sign-in for every tab), at desktop and phone sizes, against the real stack."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.browser.stack import Terminal

OpenTerminal = Callable[..., Terminal]
SIZES = {"desktop": (1000, 700), "phone": (390, 844)}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=sorted(SIZES))
def size(request: Any) -> tuple[int, int]:
    return SIZES[request.param]


def session_item(term: Terminal, session_id: str) -> Any:
    return term.page.locator(f'#session-list li[data-id="{session_id}"]')


def test_lineage_links_both_ways_rename_and_archive_from_the_list(
        open_terminal: OpenTerminal, size: tuple[int, int], db: str) -> None:
    term = open_terminal("alice", width=size[0], height=size[1])
    origin = term.new_session("origin")
    source = term.run("mkdir -p d && cd d")
    source_id = source.get_attribute("data-id")
    source.locator("button[data-fork]").click()
    term.expect(term.page).to_have_url(re.compile(r"#session=(?!" + origin + ")"))
    fork = term.session_id()
    lineage = term.page.locator("#lineage")
    term.expect(lineage).to_have_text(f"fork of origin at command {source_id}")
    lineage.get_by_role("link", name="origin").click()  # back to where it came from
    term.expect(term.page).to_have_url(re.compile(f"#session={origin}$"))

    term.page.goto(term.url + "/#")
    term.expect(session_item(term, origin)).to_contain_text(f"forks: fork of command {source_id}")
    term.expect(session_item(term, fork)).to_contain_text(f"fork of origin at command {source_id}")
    session_item(term, origin).get_by_role("link", name=f"fork of command {source_id}").click()
    term.expect(term.page).to_have_url(re.compile(f"#session={fork}$"))

    term.page.goto(term.url + "/#")
    item = session_item(term, fork)
    item.locator("button.rename").click()
    item.locator("input[name=p_name]").fill("child <b>x</b>")
    item.get_by_role("button", name="save").click()
    term.expect(session_item(term, fork).locator("a.name")).to_have_text("child <b>x</b>")
    term.expect(session_item(term, origin)).to_contain_text("forks: child <b>x</b>")

    item = session_item(term, fork)
    item.locator("button.archive").click()
    term.expect(item.locator("button.archive")).to_have_text("archive: sure?")
    item.locator("button.archive").click()
    term.expect(session_item(term, fork)).to_have_count(0)
    term.expect(term.status).to_contain_text("Session archived")
    term.expect(session_item(term, origin)).not_to_contain_text("forks:")

    # Nothing was deleted: the audit chain of the commands that ran verifies.
    done = subprocess.run([sys.executable, "-m", "executor.cli.main", "audit", "verify", "--json"],
                          env={"DATABASE_URL": db, "PATH": "/usr/bin:/bin"}, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    assert (done.returncode, report["intact"], report["breaks"]) == (0, True, []), done.stderr


def test_replay_from_a_command_shows_it_beside_the_original_with_differences_marked(
        open_terminal: OpenTerminal, size: tuple[int, int]) -> None:
    term = open_terminal("alice", width=size[0], height=size[1])
    original = term.new_session("original")
    first = term.run("echo same")
    term.run("cat /proc/sys/kernel/random/uuid")
    first.locator("button[data-replay]").click()
    term.expect(term.page.locator("#compare-view")).to_be_visible()
    rows = term.page.locator("#compare-rows .compare-row")
    term.expect(rows).to_have_count(2)
    term.expect(term.page.locator("#compare-summary")).to_have_text(
        "1 of 2 commands gave the same result")
    term.expect(rows.nth(0)).to_have_attribute("data-same", "true")
    term.expect(rows.nth(0).locator(".differs")).to_have_count(0)
    term.expect(rows.nth(1)).to_have_attribute("data-same", "false")
    term.expect(rows.nth(1).locator("pre.out.differs")).to_have_count(2)
    term.expect(rows.nth(1).locator(".exit")).to_have_text(["exit 0", "exit 0"])
    title = term.page.locator("#compare-title")
    term.expect(title).to_contain_text("beside the original original")
    title.get_by_role("link", name="original", exact=True).click()
    term.expect(term.page).to_have_url(re.compile(f"#session={original}$"))

    term.page.goto(term.url + "/#")
    replay = term.page.locator("#session-list li", has_text="replay of original")
    term.expect(replay.first).to_contain_text("replay of original · compare")
    listed = term.page.locator(f'#session-list li[data-id="{original}"]')
    term.expect(listed).to_contain_text("replays:")


def test_signing_in_carries_to_a_new_tab_until_the_token_expires(
        open_terminal: OpenTerminal, size: tuple[int, int]) -> None:
    term = open_terminal("alice", width=size[0], height=size[1])
    session = term.new_session("tabs")
    term.run("echo in the first tab")
    second = Terminal(term.page.context.new_page(), term.url)
    response = second.page.goto(f"{term.url}/#session={session}")
    # The CSP is as strict as before; the token is in no cookie.
    assert "default-src 'self'" in response.headers["content-security-policy"]
    second.expect(second.page.locator("#terminal-view")).to_be_visible()
    second.expect(second.commands().first.locator("pre.out")).to_have_text("in the first tab\n")
    assert second.page.evaluate("document.cookie") == ""

    # Signing out in one tab signs out the other.
    second.page.click("#logout")
    term.expect(term.page.locator("#login-view")).to_be_visible()

    # An expired token is dropped: the page asks to sign in.
    claims_json = base64.urlsafe_b64encode(json.dumps(
        {"sub": "x", "role": "shell_user", "exp": int(time.time()) - 10}).encode())
    claims = claims_json.decode().rstrip("=")
    term.page.evaluate("t => localStorage.setItem('pg_shell.token', t)", f"e30.{claims}.sig")
    third = Terminal(term.page.context.new_page(), term.url)
    third.page.goto(f"{term.url}/#session={session}")
    third.expect(third.page.locator("#login-view")).to_be_visible()
    assert third.page.evaluate("localStorage.getItem('pg_shell.token')") is None


def test_an_archived_session_reads_at_its_link_and_is_restored_there(
        open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    session = term.new_session("old")
    kept = term.run("echo kept > f && echo kept")
    command_id = kept.get_attribute("data-id")
    kept.locator("button[data-copy]").click()  # the id fork, replay and the CLI take
    term.expect(term.status).to_contain_text(command_id)

    term.page.goto(term.url + "/#")
    archive = session_item(term, session).locator("button.archive")
    archive.click()
    archive.click()
    term.expect(session_item(term, session)).to_have_count(0)

    term.page.goto(f"{term.url}/#session={session}")
    lineage = term.page.locator("#lineage")
    term.expect(lineage).to_contain_text("archived")
    term.expect(term.commands().first.locator("pre.out")).to_have_text("kept\n")
    term.expect(term.input).to_be_disabled()
    lineage.get_by_role("button", name="restore").click()
    term.expect(term.status).to_contain_text("Session restored")
    term.expect(lineage).not_to_contain_text("archived")
    term.expect(term.input).to_be_enabled()
    assert term.run("cat f").locator("pre.out").inner_text() == "kept\n"
    term.page.goto(term.url + "/#")
    term.expect(session_item(term, session)).to_have_count(1)

