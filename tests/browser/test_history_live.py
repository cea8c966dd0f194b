"""The page's live updates and history (DESIGN.md §12), in headless Chromium
at desktop and phone sizes: a running command's output is appended (bytes
sent stay near the output's size, a selection in it survives, the live
region announces only what is new, colours and escapes cut between its
pieces show as in one piece), "load earlier" and ↑ reach the whole
history, and long or cut outputs are collapsed behind "show all"."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.browser.stack import Terminal
from tests.db.ansi_helpers import pieces, runs
from tests.db.api_helpers import run
from tests.fixtures_stack import Gateway
from tests.support import create_user, one, tenant

OpenTerminal = Callable[..., Terminal]
SIZES = {"desktop": (1000, 700), "phone": (375, 700)}


@pytest.fixture(params=sorted(SIZES))
def size(request: Any) -> tuple[int, int]:
    return SIZES[request.param]


@pytest.fixture
def history_page(browser: Any, gateway: Gateway, db: str
                 ) -> Iterator[Callable[[str, tuple[int, int]], Terminal]]:
    """A signed-in page over the gateway alone: history is written into the
    database by hand (no executor that could claim it first)."""
    contexts: list[Any] = []

    def open_(username: str, viewport: tuple[int, int]) -> Terminal:
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        contexts.append(context)
        term = Terminal(context.new_page(), gateway.url)
        term.login(username)
        return term

    yield open_
    for context in contexts:
        context.close()


def session_with_history(db: str, outputs: list[str]) -> tuple[str, list[int]]:
    alice = create_user(db, "alice")
    conn = tenant(db, alice)
    session = str(one(conn, "SELECT shell_api.create_session('history')"))
    ids = []
    for i, output in enumerate(outputs):
        ids.append(int(one(conn, "SELECT shell_api.submit_command(%s, %s)",
                           (session, f"echo {i}"))))
        run(db, ids[-1], output)
    conn.close()
    return session, ids


def test_running_output_is_appended_keeping_a_selection_and_announcing_only_new_text(
        open_terminal: OpenTerminal, size: tuple[int, int]) -> None:
    term = open_terminal("alice", width=size[0], height=size[1])
    term.new_session()
    feed: list[Any] = []
    term.page.on("requestfinished", lambda r: feed.append(r)
                 if "/rpc/session_changes_html" in r.url else None)
    article = term.submit("for i in $(seq 1 8); do echo line$i; sleep 0.5; done")
    out = article.locator("pre.out")
    term.expect(out).to_contain_text("line1")
    # Select "line1" and mark the text node: both must outlive the updates.
    term.page.evaluate("""id => {
        const node = document.querySelector('#' + id + ' pre.out').firstChild;
        node.__marked = true;
        const range = document.createRange();
        range.setStart(node, 0); range.setEnd(node, 5);
        getSelection().removeAllRanges(); getSelection().addRange(range);
    }""", article.get_attribute("id"))
    term.expect(out).to_contain_text("line4")
    kept = term.page.evaluate("""id => [getSelection().toString(),
        document.querySelector('#' + id + ' pre.out').firstChild.__marked === true]""",
                              article.get_attribute("id"))
    assert kept == ["line1", True]
    announced = term.page.locator("#announce").text_content() or ""
    assert "line1" not in announced and announced.strip(), announced
    assert term.page.locator("#scrollback").get_attribute("aria-live") is None

    term.wait_finished(article)
    term.expect(out).to_have_text("".join(f"line{i}\n" for i in range(1, 9)))
    assert term.page.evaluate("""id => getSelection().toString()""",
                              article.get_attribute("id")) == "line1"
    # Each change sent the new lines and the command's frame, never the
    # whole output again.
    output_bytes = len("".join(f"line{i}\n" for i in range(1, 9)))
    sizes = [r.sizes()["responseBodySize"] for r in feed]
    assert sum(sizes) <= 1.2 * output_bytes + 1500 * len(sizes), (sizes, output_bytes)


def test_coloured_output_streamed_in_pieces_keeps_its_colours_with_nothing_stray(
        open_terminal: OpenTerminal) -> None:
    term = open_terminal("alice")
    term.new_session()
    feed: list[Any] = []
    term.page.on("requestfinished", lambda r: feed.append(r)
                 if "/rpc/session_changes_html" in r.url else None)
    # Each write ends inside an escape or inside a colour, a second before
    # the next one: the feed sends them as separate pieces.
    article = term.submit("printf 'collecting \\033[3'; sleep 1; "
                          "printf '2m3 items\\033[0m\\ntest_a \\033[1;3'; sleep 1; "
                          "printf '2mPASS'; sleep 1; printf 'ED\\033[0m\\n'")
    term.wait_finished(article)
    expected = [("", "collecting "), ("ansi-fg-32", "3 items"), ("", "\ntest_a "),
                ("ansi-fg-32 ansi-bold", "PASSED"), ("", "\n")]
    # The feed's pieces, put together as the page does: each one that starts
    # where the text so far ends is appended.
    joined, end, with_output = "", 0, 0
    for request in feed:
        for piece_from, piece_end, _total, inner in pieces(request.response().text()):
            if piece_from == end:
                joined += inner
                end = piece_end
                with_output += piece_end > piece_from
    assert with_output >= 3, with_output
    assert runs(joined) == expected
    # And the page shows just that.
    shown = article.locator("pre.out").evaluate("""pre => [...pre.childNodes].map(
        n => [n.nodeType === 1 ? n.className : '', n.textContent])""")
    merged: list[tuple[str, str]] = []
    for classes, text in shown:
        if merged and merged[-1][0] == classes:
            merged[-1] = (classes, merged[-1][1] + text)
        else:
            merged.append((classes, text))
    assert merged == expected


def test_load_earlier_and_arrow_up_reach_the_whole_history(
        db: str, history_page: Callable[..., Terminal], size: tuple[int, int]) -> None:
    session, ids = session_with_history(db, [f"out {i}\n" for i in range(130)])
    term = history_page("alice", size)
    term.page.evaluate("id => { location.hash = '#session=' + id }", session)
    term.expect(term.commands()).to_have_count(100)
    term.expect(term.commands().first.locator(".text")).to_have_text("echo 30")

    # ↑ past the oldest command shown goes on into the older ones.
    term.input.click()
    for _ in range(101):
        term.input.press("ArrowUp")
    term.expect(term.input).to_have_value("echo 29")
    for _ in range(40):
        term.input.press("ArrowUp")
    term.expect(term.input).to_have_value("echo 0")

    button = term.page.locator("#load-earlier")
    term.expect(button).to_be_visible()
    button.click()
    term.expect(term.commands()).to_have_count(130)
    term.expect(term.commands().first.locator(".text")).to_have_text("echo 0")
    term.expect(term.commands().first.locator("pre.out")).to_have_text("out 0\n")
    term.expect(button).to_have_count(0)
    assert [int(i) for i in term.commands().evaluate_all(
        "all => all.map(a => a.dataset.id)")] == ids


def test_long_outputs_are_collapsed_and_cut_ones_read_in_full_on_show_all(
        db: str, history_page: Callable[..., Terminal], size: tuple[int, int]) -> None:
    long_output = "".join(f"row {i}\n" for i in range(400))
    # 197 KiB in a colour set before the cut and held past it, then another.
    cut_text = "".join(f"{i:06d} " + "z" * 93 + "\n" for i in range(2000)) + "last\n"
    cut_output = "\x1b[32m" + cut_text[:-5] + "\x1b[0m\x1b[31mlast\x1b[0m\n"
    _session, ids = session_with_history(db, ["short\n", long_output, cut_output])
    term = history_page("alice", size)
    term.page.evaluate("id => { location.hash = '#session=' + id }", _session)
    term.expect(term.commands()).to_have_count(3)

    short, long_, cut = (term.page.locator(f"#cmd-{i}") for i in ids)
    term.expect(short.locator(".more")).to_have_count(0)
    term.expect(long_).to_have_class("cmd collapsed")
    term.expect(long_.locator(".more")).to_contain_text("output collapsed")
    height = long_.locator("pre.out").evaluate("e => e.clientHeight")
    assert height <= size[1] * 0.6 + 1, height
    long_.locator("button[data-show-all]").click()
    term.expect(long_.locator(".more")).to_have_count(0)
    assert long_.locator("pre.out").evaluate("e => e.clientHeight") > height

    term.expect(cut.locator(".more")).to_contain_text("output cut: 64 KiB of 197 KiB shown")
    cut.locator("button[data-show-all]").click()
    term.expect(cut.locator(".more")).to_have_count(0)
    assert cut.locator("pre.out").text_content() == cut_text
    # What was read past the cut is drawn in the colours it is in.
    assert "001999 zzz" in cut.locator("pre.out span.ansi-fg-32").last.text_content()
    term.expect(cut.locator("pre.out span.ansi-fg-31")).to_have_text("last")
