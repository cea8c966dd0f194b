"""Terminal commands in the page (DESIGN.md §13, issue 23), in headless
Chromium against the real gateway, executor, Docker engine and PostgreSQL:
what is typed into xterm.js (or a phone's key bar) reaches the program in
order, full-screen programs draw and quit, a password typed with echo off
is nowhere, the window size follows the page, and a finished command stays
a read-only terminal, also when read back later.

The screen is read from the text the page keeps beside xterm.js's canvases.
Waits are liveness bounds, never timings."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import pytest

from tests.browser.stack import Terminal
from tests.support import call, tenant

OpenTerminal = Callable[..., Terminal]
PHONE = (390, 844)


def watch_for_problems(term: Terminal) -> list[str]:
    """Content-Security-Policy refusals and uncaught errors in the page."""
    problems: list[str] = []
    term.page.on("console", lambda m: problems.append(m.text)
                 if "Content Security Policy" in m.text else None)
    term.page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    return problems


@pytest.fixture
def term(open_terminal: OpenTerminal) -> Iterator[Terminal]:
    terminal = open_terminal("alice", tty=True)
    problems = watch_for_problems(terminal)
    terminal.new_session("interactive")
    yield terminal
    assert problems == []


@pytest.fixture
def phone(open_terminal: OpenTerminal) -> Iterator[Terminal]:
    terminal = open_terminal("bob", width=PHONE[0], height=PHONE[1], tty=True)
    problems = watch_for_problems(terminal)
    terminal.new_session("phone")
    yield terminal
    assert problems == []


def as_owner(db: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    """``sql`` as the database's owner, who sees every table."""
    conn = psycopg2.connect(db)
    try:
        return call(conn, sql, params)
    finally:
        conn.close()


def view_of(article: Any) -> Any:
    return article.locator(".tty-view")


def screen(view: Any) -> list[str]:
    """The lines the terminal shows (the page keeps them as text beside its canvases)."""
    return (view.locator(".tty-text").text_content() or "").split("\n")


def wait_screen(term: Terminal, view: Any, what: str, check: Callable[[list[str]], bool],
                timeout: float = 60) -> list[str]:
    """The screen once ``check`` holds for it (the timeout proves only that it did not hang)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = screen(view)
        if check(lines):
            return lines
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: the screen shows (its last 40 lines) {lines[-40:]!r}")
        term.page.wait_for_timeout(50)


def shows(text: str) -> Callable[[list[str]], bool]:
    return lambda lines: any(text in line for line in lines)


def line_is(text: str) -> Callable[[list[str]], bool]:
    return lambda lines: text in lines


def shows_wrapped(text: str) -> Callable[[list[str]], bool]:
    """``text`` anywhere, also when the terminal wrapped it onto the next row."""
    return lambda lines: text in "".join(lines)


def start(term: Terminal, command: str, ready: str, live: bool = True) -> tuple[Any, Any]:
    """Submits ``command`` on a terminal; its article and view once ``ready``
    shows. ``live=False``: a command that may end before its view is seen live."""
    article = term.submit(command)
    view = view_of(article)
    if live:
        term.expect(view).to_have_attribute("data-state", "live")
    wait_screen(term, view, f"{command!r} to show {ready!r}", shows(ready))
    return article, view


def keys(term: Terminal, text: str, enter: bool = True) -> None:
    term.page.keyboard.type(text)
    if enter:
        term.page.keyboard.press("Enter")


def finished_ok(term: Terminal, article: Any) -> None:
    term.wait_finished(article)
    term.expect(article).to_have_attribute("data-outcome", "ok")
    term.expect(view_of(article)).to_have_attribute("data-state", "ended")


def test_a_python_repl_typed_in_the_page(term: Terminal) -> None:
    article, view = start(term, "python3", ">>> ")
    term.expect(term.page.locator(".tty-view .xterm-helper-textarea")).to_be_focused()
    # No batch time limit is shown for it; a desktop needs no key bar.
    term.expect(article.locator(".meta")).to_have_text(re.compile(r"^running · \d+ s$"))
    term.expect(term.page.locator("#keybar")).to_be_hidden()
    keys(term, "1+1")
    wait_screen(term, view, "1+1 answered", line_is("2"))
    keys(term, "exit()")
    finished_ok(term, article)
    # The view stays, read-only, and the input line has the focus again.
    assert "2" in screen(view)
    term.expect(term.input).to_be_focused()
    term.expect(article.locator("pre.out")).to_be_hidden()
    # The vendored UMD builds leave no global names behind.
    assert term.page.evaluate(
        "['Terminal', 'FitAddon', 'CanvasAddon'].filter((name) => name in globalThis)") == []


def test_read_is_answered(term: Terminal) -> None:
    article, view = start(term, 'read -p "name? " n; echo "hi $n"', "name? ")
    keys(term, "Ada")
    finished_ok(term, article)
    wait_screen(term, view, "the greeting", line_is("hi Ada"))


def test_vi_edits_and_saves_a_file(term: Terminal, db: str) -> None:
    article, view = start(term, "vi notes.txt", "notes.txt")
    keys(term, "i", enter=False)
    keys(term, "written in vi", enter=False)
    term.page.keyboard.press("Escape")
    keys(term, ":wq")
    finished_ok(term, article)
    cat, _ = start(term, "cat notes.txt", "written in vi", live=False)
    finished_ok(term, cat)
    user_id = as_owner(db, "SELECT id FROM shell.users WHERE username = 'alice'")[0]["id"]
    alice = tenant(db, user_id)
    try:
        files = call(alice, "SELECT path, size FROM shell_api.session_files(%s) "
                            "WHERE path = 'notes.txt'", (term.session_id(),))
    finally:
        alice.close()
    assert files == [{"path": "notes.txt", "size": len("written in vi\n")}]


def test_top_draws_and_quits_with_q(term: Terminal) -> None:
    article, view = start(term, "top", "load average")
    wait_screen(term, view, "top's process list", shows("PID"))
    keys(term, "q", enter=False)
    finished_ok(term, article)


def test_less_pages_with_space_and_quits_with_q(term: Terminal) -> None:
    finished_ok(term, term.submit("seq 1 200 > lines.txt"))
    article, view = start(term, "less lines.txt", "lines.txt")
    rows = int(view.get_attribute("data-rows"))
    first = wait_screen(term, view, "the first page", line_is("1"))
    assert str(rows) not in first, first
    keys(term, " ", enter=False)
    after = wait_screen(term, view, "the next page", line_is(str(rows)))
    assert "1" not in after, after
    keys(term, "q", enter=False)
    finished_ok(term, article)


def test_ctrl_c_interrupts_the_repl_which_goes_on(term: Terminal) -> None:
    article, view = start(term, "python3", ">>> ")
    keys(term, "import time; time.sleep(600)")
    wait_screen(term, view, "the sleep typed", shows("time.sleep(600)"))
    term.page.keyboard.press("Control+c")
    lines = wait_screen(term, view, "the interrupt", shows("KeyboardInterrupt"))
    assert term.commands().last.get_attribute("data-status") == "running", lines
    keys(term, "6*7")
    wait_screen(term, view, "the REPL going on", line_is("42"))
    keys(term, "exit()")
    finished_ok(term, article)


def test_a_password_typed_with_echo_off_is_neither_stored_nor_shown(term: Terminal,
                                                                     db: str) -> None:
    secret = "hunter2-in-the-page"
    article, view = start(term, 'read -s -p "pw: " p; echo; echo "got ${#p}"', "pw: ")
    keys(term, secret)
    finished_ok(term, article)
    wait_screen(term, view, "the length", line_is(f"got {len(secret)}"))
    command_id = int(article.get_attribute("data-id"))
    # Typed a key at a time, it went in one or more pieces: each redacted.
    stored = as_owner(db, "SELECT data, redacted, length FROM shell.command_input "
                          "WHERE command_id = %s AND kind = 'data' ORDER BY seq", command_id)
    assert stored and all(row["data"] is None and row["redacted"] for row in stored), stored
    assert sum(row["length"] for row in stored) == len(secret) + 1  # and the Enter
    pattern = f"%{secret}%"
    anywhere = as_owner(
        db, "SELECT (SELECT count(*) FROM shell.command_input WHERE data LIKE %s) AS input,"
            " (SELECT count(*) FROM shell.secret_input) AS unlogged,"
            " (SELECT count(*) FROM shell.commands c WHERE shell.output_of(c) LIKE %s"
            "  OR c.result_record::text LIKE %s OR c.command LIKE %s) AS commands",
        pattern, pattern, pattern, pattern)
    assert anywhere == [{"input": 0, "unlogged": 0, "commands": 0}], anywhere
    assert secret not in " ".join(screen(view))
    assert secret not in term.page.content()
    term.page.reload()
    term.expect(term.commands()).to_have_count(1)
    assert secret not in term.page.content()


def test_resize_changes_stty_size(term: Terminal) -> None:
    article, view = start(term, 'stty size; read -p "go? " x; stty size', "go? ")
    cols, rows = view.get_attribute("data-cols"), view.get_attribute("data-rows")
    assert f"{rows} {cols}" in screen(view)
    term.page.set_viewport_size({"width": 640, "height": 460})
    # data-cols changes once the server took the new size: input sent after it comes after it.
    term.expect(view).not_to_have_attribute("data-cols", cols)
    term.expect(view).not_to_have_attribute("data-rows", rows)
    new_cols, new_rows = view.get_attribute("data-cols"), view.get_attribute("data-rows")
    assert int(new_cols) < int(cols) and int(new_rows) < int(rows)
    view.click()
    term.page.keyboard.press("Enter")
    finished_ok(term, article)
    wait_screen(term, view, "the new size", line_is(f"{new_rows} {new_cols}"))


def test_fast_typing_and_a_large_paste_arrive_whole_and_in_order(term: Terminal) -> None:
    typed = "".join(f"{i:03d} the quick brown fox " for i in range(15))
    article, view = start(term, "IFS= read -r -p 'line? ' line; printf %s \"$line\" | md5sum",
                          "line? ")
    term.page.keyboard.type(typed)  # one key at a time, as fast as the page takes them
    term.page.keyboard.press("Enter")
    finished_ok(term, article)
    digest = hashlib.md5(typed.encode()).hexdigest()
    wait_screen(term, view, "the typed line's digest", shows_wrapped(digest))

    # More than one send_input may take (64 KiB): it goes in pieces, in order.
    # Pasted once the line discipline is raw (a canonical line holds 4,095 bytes).
    pasted = "".join(f"{i:06d}" for i in range(12_000))  # 72,000 bytes
    article, view = start(term, "stty -icanon; echo raw; head -c 72000 | md5sum", "raw")
    term.page.keyboard.insert_text(pasted)
    finished_ok(term, article)
    digest = hashlib.md5(pasted.encode()).hexdigest()
    wait_screen(term, view, "the paste's digest", shows_wrapped(digest))


def test_cancel_still_stops_a_terminal_command(term: Terminal) -> None:
    article, view = start(term, "python3", ">>> ")
    term.page.click("#stop")
    term.wait_finished(article)
    term.expect(article).to_have_attribute("data-status", "cancelled")
    term.expect(view).to_have_attribute("data-state", "ended")


def test_a_finished_terminal_command_is_read_back_into_a_terminal(term: Terminal) -> None:
    article, view = start(term, r"printf '\033[31mred\033[0m and plain\n'; tput cols", "red",
                          live=False)
    finished_ok(term, article)
    cols = view.get_attribute("data-cols")
    wait_screen(term, view, "the output", line_is(cols))
    term.page.reload()
    term.expect(term.commands()).to_have_count(1)
    again = view_of(term.commands().first)
    term.expect(again).to_have_attribute("data-state", "ended")
    lines = wait_screen(term, again, "the output read back", line_is("red and plain"))
    assert cols in lines
    term.expect(term.commands().first.locator("pre.out")).to_be_hidden()


def test_the_tty_switch_off_runs_plain_commands_as_html(term: Terminal) -> None:
    term.page.click("#tty-mode")
    term.expect(term.page.locator("#tty-mode")).to_have_attribute("aria-pressed", "false")
    article = term.run("echo plain; tty || true")
    term.expect(article.locator("pre.out")).to_have_text("plain\nnot a tty\n")
    term.expect(view_of(article)).to_have_count(0)
    term.page.click("#tty-mode")
    term.expect(term.page.locator("#tty-mode")).to_have_attribute("aria-pressed", "true")
    start(term, "tty", "/dev/", live=False)


def test_a_phone_types_with_the_key_bar(phone: Terminal) -> None:
    term = phone
    bar = term.page.locator("#keybar")
    term.expect(bar).to_be_hidden()
    article, view = start(term, 'read -p "name? " n; echo "hi $n"', "name? ")
    term.expect(bar).to_be_visible()
    for button in bar.locator("button").all():
        box = button.bounding_box()
        assert box and box["width"] >= 44 and box["height"] >= 44, box
    field = term.page.locator("#keybar-input")
    field.fill("Bo")
    field.press("Enter")
    finished_ok(term, article)
    wait_screen(term, view, "the greeting", line_is("hi Bo"))
    term.expect(bar).to_be_hidden()

    # ↑ recalls the REPL's last line; the sticky Ctrl then D ends it.
    article, view = start(term, "python3", ">>> ")
    field.fill("20+1")
    field.press("Enter")
    wait_screen(term, view, "20+1 answered", line_is("21"))
    bar.locator('[data-key="up"]').click()
    wait_screen(term, view, "the line recalled", lambda lines: lines.count(">>> 20+1") == 2)
    field.press("Enter")
    wait_screen(term, view, "the recalled line answered", lambda lines: lines.count("21") == 2)
    ctrl = bar.locator('[data-key="ctrl"]')
    ctrl.click()
    term.expect(ctrl).to_have_attribute("aria-pressed", "true")
    field.fill("d")
    term.expect(ctrl).to_have_attribute("aria-pressed", "false")
    finished_ok(term, article)
