"""Opening a session asks the executors to start its next container ahead
(shell_api.warm_session): one POST per opening, whichever way the session was
opened (created, chosen from the list, gone back to, a page loaded at its
link), none from the list or from the live loop's polls, and the page never
waits for it or reports its errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.browser.stack import Terminal

OpenTerminal = Callable[..., Terminal]
WARM = "/rpc/warm_session"


def is_warm(request: Any) -> bool:
    return request.url.endswith(WARM)


def test_each_opening_of_a_session_sends_one_warm_request_and_polls_send_none(
        open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    page = term.page
    warmed: list[Any] = []
    polls: list[Any] = []
    page.on("request", lambda r: warmed.append(r) if is_warm(r) else None)
    page.on("request", lambda r: polls.append(r) if "/rpc/session_changes_html?" in r.url else None)

    with page.expect_request(is_warm):
        first = term.new_session("first")
    term.run("echo one; sleep 1; echo two")  # the live loop polls while it runs

    page.goto(term.url + "/#")  # the list warms nothing
    term.expect(page.locator("#sessions-view")).to_be_visible()
    with page.expect_request(is_warm):
        page.locator(f'#session-list li[data-id="{first}"] a.name').click()
    term.expect(term.commands()).to_have_count(1)

    page.goto(term.url + "/#")
    with page.expect_request(is_warm):
        second = term.new_session("second")
    with page.expect_request(is_warm):
        page.go_back()  # the list
        term.expect(page.locator("#sessions-view")).to_be_visible()
        page.go_back()  # and the first session again
    term.expect(page.locator("#where")).to_have_text("first")
    with page.expect_request(is_warm):
        page.reload()
    term.expect(term.commands()).to_have_count(1)  # its history is back before typing
    term.run("echo three")

    assert [(r.method, r.post_data_json, r.headers["content-type"]) for r in warmed] == [
        ("POST", {"p_session_id": first}, "application/json"),
        ("POST", {"p_session_id": first}, "application/json"),
        ("POST", {"p_session_id": second}, "application/json"),
        ("POST", {"p_session_id": first}, "application/json"),
        ("POST", {"p_session_id": first}, "application/json"),
    ]
    assert len(polls) > len(warmed)


def test_a_session_opens_and_runs_while_its_warm_request_hangs_and_its_error_is_not_shown(
        open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    page = term.page
    term.new_session("warming")
    term.run("echo before")
    answers = iter(["hold", "fail"])
    held: list[Any] = []

    def warm(route: Any) -> None:
        if next(answers) == "hold":
            held.append(route)  # never answered while the test runs
        else:
            route.fulfill(status=500, content_type="application/json",
                          body='{"message": "warming failed"}')

    page.route("**" + WARM, warm)
    page.reload()
    term.expect(term.commands().first.locator("pre.out")).to_have_text("before\n")
    term.run("echo after")
    assert len(held) == 1

    page.goto(term.url + "/#")
    with page.expect_response("**" + WARM) as answer:
        page.locator("#session-list li a.name", has_text="warming").click()
    assert answer.value.status == 500
    term.expect(term.commands()).to_have_count(2)
    page.wait_for_timeout(500)  # time for a wrongly reported error to reach the status line
    term.expect(term.status).to_have_text("")
