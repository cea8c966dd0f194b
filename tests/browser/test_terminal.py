"""The web UI in a real headless Chromium, against the real gateway, executor
daemon, Docker engine and PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.browser.stack import Terminal
from tests.support import call, connect_as

OpenTerminal = Callable[..., Terminal]
ACTIVE = re.compile(r"^(pending|claimed|running)$")


def test_signs_in_runs_a_pipeline_and_keeps_the_session_on_reload(
        open_terminal: OpenTerminal, artifacts: Path) -> None:
    term = open_terminal("alice")
    csp_errors: list[str] = []
    term.page.on("console", lambda m: csp_errors.append(m.text)
                 if "Content Security Policy" in m.text else None)
    session_id = term.new_session("first")
    about = term.page.locator(".sandbox-about")  # what the sandbox is, until a command ran
    term.expect(about).to_be_visible()
    term.expect(about).to_contain_text("no network")

    article = term.run("echo hello | tr a-z A-Z")
    term.expect(about).to_be_hidden()

    term.expect(article.locator("pre.out")).to_have_text("HELLO\n")
    term.expect(article).to_have_attribute("data-status", "done")
    term.expect(article.locator(".meta")).to_contain_text(re.compile(r"done · exit 0 · \d+ ms"))
    term.expect(article.locator("button[data-fork]")).to_be_visible()
    term.expect(term.status).to_have_text("")
    term.page.screenshot(path=str(artifacts / "terminal.png"))

    term.page.reload()
    term.expect(term.page.locator("#terminal-view")).to_be_visible()
    assert term.session_id() == session_id
    term.expect(term.commands()).to_have_count(1)
    term.expect(term.commands().first.locator("pre.out")).to_have_text("HELLO\n")
    term.expect(term.page.locator("#where")).to_have_text("first")
    assert csp_errors == []

    term.page.click(".brand")
    term.expect(term.page.locator("#session-list a")).to_have_text(["first"])


def test_wrong_password_shows_the_error_in_the_status_line(open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    term.page.click("#logout")
    term.page.fill("#login-form [name=p_username]", "alice")
    term.page.fill("#login-form [name=p_password]", "wrong")
    term.page.click("#login-form button[type=submit]")
    term.expect(term.status).to_have_class(re.compile(r"\berror\b"))
    term.expect(term.status).not_to_have_text("")
    term.expect(term.page.locator("#login-view")).to_be_visible()


def test_cd_persists_and_fork_from_here_opens_a_session_with_that_state(
        open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    first = term.new_session()
    exported = term.run("export GREETING=forked")
    term.expect(term.run("mkdir d && cd d")).to_have_attribute("data-status", "done")
    pwd = term.run("pwd")
    term.expect(pwd.locator("pre.out")).to_have_text("/home/sandbox/d\n")
    term.expect(pwd.locator(".prompt")).to_contain_text("~/d")

    exported.locator("button[data-fork]").click()
    term.page.wait_for_function("s => location.hash !== '#session=' + s", arg=first)
    term.expect(term.commands()).to_have_count(0)
    term.expect(term.status).to_contain_text("Forked")
    assert term.session_id() != first
    # The fork starts from the cwd and environment as they were after that
    # command (a fork gets its own, new files).
    term.expect(term.run("echo $GREETING").locator("pre.out")).to_have_text("forked\n")


def test_output_of_a_long_command_appears_before_it_ends(open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    term.new_session()
    article = term.submit("for i in 1 2 3; do echo line$i; sleep 1; done; sleep 2")

    term.expect(article.locator("pre.out")).to_contain_text("line1")
    # Seen while it still runs: at least two seconds of sleep remain.
    assert ACTIVE.match(article.get_attribute("data-status") or "")
    term.expect(article.locator("button[data-cancel]")).to_be_visible()

    term.wait_finished(article)
    term.expect(article.locator("pre.out")).to_have_text("line1\nline2\nline3\n")
    term.expect(article).to_have_attribute("data-status", "done")
    # Replaced in place, never duplicated.
    term.expect(term.page.locator("#scrollback article.cmd")).to_have_count(1)


def test_the_cancel_button_and_ctrl_c_cancel_the_running_command(
        open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    term.new_session()

    by_button = term.submit("echo started; sleep 60")
    term.expect(by_button.locator("pre.out")).to_contain_text("started")
    by_button.locator("button[data-cancel]").click()
    term.expect(by_button).to_have_attribute("data-status", "cancelled")
    term.expect(by_button.locator(".meta")).to_contain_text("cancelled")
    term.expect(by_button.locator("button[data-fork]")).to_be_visible()

    by_key = term.submit("echo again; sleep 60")
    term.expect(by_key.locator("pre.out")).to_contain_text("again")
    term.input.fill("half-typed")
    term.input.press("Control+c")
    term.expect(term.input).to_have_value("")
    term.expect(by_key).to_have_attribute("data-status", "cancelled")
    term.expect(term.status).to_have_text("")


def test_ansi_colours_render_as_styled_spans(open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    term.new_session()
    article = term.run(r"printf '\033[31mred\033[0m plain\n'")

    red = article.locator("pre.out span.ansi-fg-31")
    term.expect(red).to_have_text("red")
    term.expect(article.locator("pre.out")).to_have_text("red plain\n")
    r, g, b = map(int, re.findall(r"\d+", red.evaluate("e => getComputedStyle(e).color"))[:3])
    assert r > 150 and g < 120 and b < 120, (r, g, b)


def test_html_in_output_and_commands_shows_as_text(open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    term.new_session()
    command = "echo '<img src=x onerror=alert(1)>'"
    article = term.run(command)

    term.expect(article.locator("pre.out")).to_have_text("<img src=x onerror=alert(1)>\n")
    term.expect(article.locator(".text")).to_have_text(command)
    term.expect(term.page.locator("#scrollback img")).to_have_count(0)
    term.page.reload()
    term.expect(term.commands().first.locator("pre.out")).to_have_text("<img src=x "
                                                                       "onerror=alert(1)>\n")
    term.expect(term.page.locator("img")).to_have_count(0)
    assert term.dialogs == []


def test_arrow_keys_recall_earlier_commands(open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    term.new_session()
    term.run("echo one")
    term.run("echo two")

    term.input.fill("draft")
    term.input.press("ArrowUp")
    term.expect(term.input).to_have_value("echo two")
    term.input.press("ArrowUp")
    term.expect(term.input).to_have_value("echo one")
    term.input.press("ArrowUp")
    term.expect(term.input).to_have_value("echo one")
    term.input.press("ArrowDown")
    term.expect(term.input).to_have_value("echo two")
    term.input.press("ArrowDown")
    term.expect(term.input).to_have_value("draft")

    # After a reload the history comes from the commands shown.
    term.page.reload()
    term.expect(term.commands()).to_have_count(2)
    term.input.press("ArrowUp")
    term.expect(term.input).to_have_value("echo two")


def test_another_user_cannot_reach_a_session_by_hash_or_by_form(
        open_terminal: OpenTerminal, db: str) -> None:
    alice = open_terminal("alice")
    alice_session = alice.new_session()
    alice.run("echo alice-secret")

    bob = open_terminal("bob")
    bob.page.evaluate("id => { location.hash = '#session=' + id }", alice_session)
    bob.expect(bob.status).to_contain_text("session not found")
    bob.expect(bob.status).to_have_class(re.compile(r"\berror\b"))
    bob.expect(bob.page.locator("body")).not_to_contain_text("alice-secret")
    bob.expect(bob.commands()).to_have_count(0)

    # His own session's form, pointed at hers.
    bob.page.click(".brand")
    bob.new_session()
    bob.page.evaluate("id => { document.querySelector('#session-id').value = id }", alice_session)
    bob.input.fill("echo from-bob")
    bob.input.press("Enter")
    bob.expect(bob.status).to_contain_text("session not found")
    bob.expect(bob.input).to_have_value("echo from-bob")
    bob.expect(bob.commands()).to_have_count(0)
    bob.expect(bob.page.locator("body")).not_to_contain_text("alice-secret")

    conn = connect_as(db, "postgres")
    try:
        rows = call(conn, "SELECT command FROM shell.commands WHERE session_id = %s ORDER BY id",
                    (alice_session,))
    finally:
        conn.close()
    assert [r["command"] for r in rows] == ["echo alice-secret"]


def test_phone_width_has_no_horizontal_scroll(open_terminal: OpenTerminal, artifacts: Path) -> None:
    term = open_terminal("alice", width=375, height=700)
    term.new_session("a session with a rather long name that should not widen the page at all")
    long_word = "x" * 300
    article = term.run(f"echo {long_word}; echo short")
    term.expect(article.locator("pre.out")).to_have_text(f"{long_word}\nshort\n")

    widths = term.page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth,"
        " document.body.scrollWidth]")
    assert widths[0] <= widths[1] and widths[2] <= widths[1], widths
    box = term.input.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375, box
    term.page.screenshot(path=str(artifacts / "terminal-phone.png"))


def test_live_output_works_by_polling_when_the_server_answers_at_once(
        open_terminal: OpenTerminal) -> None:
    # Plain PostgREST ignores `Prefer: wait=…`: drop the header, as it would.
    term = open_terminal("alice")
    polls: list[str] = []

    def without_prefer(route: Any) -> None:
        polls.append(route.request.url)
        headers = {k: v for k, v in route.request.headers.items() if k.lower() != "prefer"}
        route.continue_(headers=headers)

    term.page.route("**/rpc/session_changes_html?*", without_prefer)
    term.new_session()
    article = term.submit("echo first; sleep 2; echo second")
    term.expect(article.locator("pre.out")).to_contain_text("first")
    term.wait_finished(article)
    term.expect(article.locator("pre.out")).to_contain_text("first\nsecond\n")
    term.expect(article).to_have_attribute("data-status", "done")
    assert len(polls) >= 2
