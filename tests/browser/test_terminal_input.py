"""The input line and the scrollback as a person expects them (issue 13:
input, failures and limits, screen keys, phone), at desktop and phone sizes,
against the real gateway, executor, Docker engine and PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.browser.stack import Terminal

OpenTerminal = Callable[..., Terminal]
SIZES = {"desktop": (1000, 700), "phone": (390, 844)}


@pytest.fixture(params=sorted(SIZES))
def term(request: Any, open_terminal: OpenTerminal) -> Terminal:
    width, height = SIZES[request.param]
    terminal = open_terminal("alice", width=width, height=height)
    terminal.new_session("input")
    return terminal


def hidden_ids(term: Terminal) -> list[str]:
    return term.page.eval_on_selector_all(
        "#scrollback article.cmd", "all => all.filter(a => a.hidden).map(a => a.dataset.id)")


def test_shift_enter_adds_a_line_a_paste_keeps_lines_and_enter_runs_it_as_typed(term: Terminal):
    term.input.click()
    term.page.keyboard.type("echo one")
    term.page.keyboard.press("Shift+Enter")
    term.page.keyboard.type("echo two")
    term.expect(term.input).to_have_value("echo one\necho two")
    term.expect(term.commands()).to_have_count(0)  # Shift+Enter did not run it
    term.page.keyboard.press("Enter")
    article = term.wait_finished(term.commands().last)
    term.expect(article.locator(".text")).to_have_text("echo one\necho two")
    term.expect(article.locator("pre.out")).to_have_text("one\ntwo\n")
    term.expect(term.input).to_have_value("")

    # A pasted heredoc writes a file, with stdin empty.
    term.input.click()
    heredoc_text = "cat > note.txt <<'EOF'\nfirst line\nsecond line\nEOF\ncat note.txt"
    term.page.keyboard.insert_text(heredoc_text)
    term.expect(term.input).to_have_value(heredoc_text)
    term.page.keyboard.press("Enter")
    heredoc = term.wait_finished(term.commands().last)
    term.expect(heredoc.locator("pre.out")).to_have_text("first line\nsecond line\n")
    term.expect(heredoc).to_have_attribute("data-outcome", "ok")


def test_the_prompt_shows_the_sessions_directory_shortened_to_home(term: Terminal):
    term.expect(term.page.locator("#prompt-cwd")).to_have_text("~")
    term.run("mkdir -p work/src && cd work/src")
    term.expect(term.page.locator("#prompt-cwd")).to_have_text("~/work/src")
    pwd = term.run("pwd")
    term.expect(pwd.locator(".prompt")).to_have_text("~/work/src $")
    term.run("cd ..")
    term.expect(term.page.locator("#prompt-cwd")).to_have_text("~/work")
    term.page.reload()  # the session's directory again, from the page's start
    term.expect(term.page.locator("#prompt-cwd")).to_have_text("~/work")


def test_failures_stand_out_with_the_reason_in_words_and_shell_errors_name_no_sandbox_path(
        term: Terminal):
    ok = term.run("true")
    cd = term.run("cd /no/such/dir")
    missing = term.run("no-such-program")
    term.expect(ok).to_have_attribute("data-outcome", "ok")
    term.expect(cd).to_have_attribute("data-outcome", "failed")
    term.expect(cd.locator(".meta")).to_contain_text(re.compile(r"^exit 1: failed · \d+ ms$"))
    term.expect(cd.locator("pre.out")).to_have_text(
        "bash: line 1: cd: /no/such/dir: No such file or directory\n")
    term.expect(missing.locator(".meta")).to_contain_text("exit 127: command not found")
    term.expect(missing.locator("pre.out")).to_have_text(
        "bash: line 1: no-such-program: command not found\n")
    assert "/opt/pg-shell" not in term.scrollback.inner_text()
    # In colour: a failure's border and meta differ from a success's.
    colours = ("a => [getComputedStyle(a).borderLeftColor,"
               " getComputedStyle(a.querySelector('.meta')).color]")
    assert ok.evaluate(colours) != cd.evaluate(colours)
    assert cd.evaluate(colours) == missing.evaluate(colours)


def test_a_running_command_counts_against_its_limit_and_the_stop_control_ends_it(term: Terminal):
    stop = term.page.locator("#stop")
    term.expect(stop).to_be_hidden()
    article = term.submit("echo started; sleep 60")
    term.expect(article.locator("pre.out")).to_contain_text("started")
    term.expect(article.locator(".meta")).to_have_text(
        re.compile(r"^running · \d+ s of the 20 s time limit$"))
    term.expect(stop).to_be_visible()
    box = stop.bounding_box()
    if term.page.viewport_size["width"] < 600:
        assert box["width"] >= 44 and box["height"] >= 44, box
    stop.click()
    term.expect(article).to_have_attribute("data-status", "cancelled")
    term.expect(article).to_have_attribute("data-outcome", "cancelled")
    term.expect(article.locator(".meta")).to_contain_text(re.compile(r"^cancelled"))
    term.expect(stop).to_be_hidden()
    term.expect(article.locator("pre.out")).to_contain_text(
        "[pg-shell: cancelled, so its cd and export did not take effect")


def test_clear_and_ctrl_l_clear_the_view_history_stays_and_ctrl_u_empties_the_line(term: Terminal):
    first = term.run("echo before")
    term.input.fill("clear")
    term.input.press("Enter")
    term.expect(first).to_be_hidden()
    term.expect(term.commands()).to_have_count(2)
    cleared = term.wait_finished(term.commands().last)
    # `clear` itself works (TERM is set) and, having worked, hides itself.
    term.expect(cleared).to_have_attribute("data-outcome", "ok")
    term.expect(cleared).to_be_hidden()
    after = term.run("echo after")
    term.expect(after).to_be_visible()
    assert term.commands().count() == 3

    # History stays: ↑ recalls the cleared commands too.
    term.input.click()
    for expected in ("echo after", "clear", "echo before"):
        term.input.press("ArrowUp")
        term.expect(term.input).to_have_value(expected)

    term.input.press("Control+u")
    term.expect(term.input).to_have_value("")
    term.input.press("Control+l")
    term.expect(after).to_be_hidden()
    assert len(hidden_ids(term)) == 3
    term.expect(term.run("echo next")).to_be_visible()


def test_touch_targets_are_at_least_44_px_on_a_phone(open_terminal: OpenTerminal):
    term = open_terminal("bob", width=390, height=844)
    term.new_session("phone")
    article = term.run("echo hi")
    for button in (article.locator("button[data-fork]"), article.locator("button[data-replay]"),
                   term.page.locator("#logout"), term.page.locator("#files-toggle")):
        box = button.bounding_box()
        assert box["width"] >= 44 and box["height"] >= 44, (button, box)
    term.page.goto(term.url + "/#")
    term.expect(term.page.locator("#session-list li")).to_have_count(1)
    for button in term.page.locator("#session-list button").all():
        box = button.bounding_box()
        assert box["width"] >= 44 and box["height"] >= 44, box
