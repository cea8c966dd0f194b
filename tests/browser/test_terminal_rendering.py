"""Plain output in a real headless Chromium as a terminal shows it, against
the real gateway, executor daemon, Docker engine and PostgreSQL: a carriage
return overwrites its line (also when it arrives in a later piece: a
progress bar ends as its last value), a line streamed in pieces stays whole
live and after a reload, a clear of the screen in a later piece leaves only
what follows it, charset selections (ESC ( B) leave nothing stray, and
256-colour, truecolour, underline, italic and reverse show as their classes
and styles."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.browser.stack import Terminal

OpenTerminal = Callable[..., Terminal]
Runs = list[tuple[tuple[str, ...], str]]


def shown(article: Any) -> Runs:
    """The (classes, text) runs the command's output shows, neighbours with
    the same classes joined (the page may hold a line as several nodes)."""
    nodes = article.locator("pre.out").evaluate("""pre => [...pre.childNodes].map(
        n => [n.nodeType === 1 ? [...n.classList].sort() : [], n.textContent])""")
    joined: Runs = []
    for classes, text in nodes:
        if not text:
            continue
        if joined and joined[-1][0] == tuple(classes):
            joined[-1] = (joined[-1][0], joined[-1][1] + text)
        else:
            joined.append((tuple(classes), text))
    return joined


def run_in_new_session(open_terminal: OpenTerminal, command: str,
                       wait: bool = True) -> tuple[Terminal, Any]:
    """The command's article in a new session of alice's: finished, or
    (``wait=False``) just submitted, to watch its output arrive."""
    term = open_terminal("alice")
    term.new_session()
    return term, term.run(command) if wait else term.submit(command)


def test_a_carriage_return_overwrites_the_line(open_terminal: OpenTerminal) -> None:
    term, article = run_in_new_session(open_terminal, r"printf 'abc\rX\n'")
    term.expect(article.locator("pre.out")).to_have_text("Xbc\n")
    assert shown(article) == [((), "Xbc\n")]


# The feed's second piece starts with a newline, which an HTML parser drops
# right after <pre>'s start tag unless the server doubles it (shell.pre_text).
def test_a_line_streamed_in_pieces_shows_as_its_lines_live_and_after_a_reload(
        open_terminal: OpenTerminal) -> None:
    term, article = run_in_new_session(
        open_terminal, r"printf a; sleep 1; printf '\nb\n'", wait=False)
    term.expect(article.locator("pre.out")).to_contain_text("a")
    term.wait_finished(article)
    term.expect(article.locator("pre.out")).to_have_text("a\nb\n")
    assert shown(article) == [((), "a\nb\n")]

    term.page.reload()
    term.expect(term.commands()).to_have_count(1)
    term.expect(term.commands().first.locator("pre.out")).to_have_text("a\nb\n")
    assert shown(term.commands().first) == [((), "a\nb\n")]


def test_a_progress_bar_streamed_in_pieces_ends_showing_its_last_value(
        open_terminal: OpenTerminal) -> None:
    term, article = run_in_new_session(
        open_terminal, r"for i in 1 2 3; do printf '\r%s%%' $((i*30)); sleep 0.6; done; echo",
        wait=False)
    term.expect(article.locator("pre.out")).to_contain_text("%")
    term.wait_finished(article)
    term.expect(article).to_have_attribute("data-status", "done")
    term.expect(article.locator("pre.out")).to_have_text("90%\n")
    assert shown(article) == [((), "90%\n")]


def test_a_charset_selection_leaves_nothing_stray(open_terminal: OpenTerminal) -> None:
    # What `tput bold` and `tput sgr0` send.
    term, article = run_in_new_session(open_terminal, r"printf '\033[1mbold\033(B\033[m plain\n'")
    term.expect(article.locator("pre.out")).to_have_text("bold plain\n")
    assert shown(article) == [(("ansi-bold",), "bold"), ((), " plain\n")]


def test_256_colour_truecolour_and_attributes_show_as_classes_and_styles(
        open_terminal: OpenTerminal) -> None:
    term, article = run_in_new_session(
        open_terminal, r"printf '\033[38;5;1mR\033[0m\033[38;2;100;200;255mT\033[0m"
                       r"\033[4mU\033[0m\033[3mI\033[0m\033[7mV\033[0m\n'")
    out = article.locator("pre.out")
    term.expect(out).to_have_text("RTUIV\n")
    # 38;5;1 is palette red (not bold), 38;2;100;200;255 the palette's
    # nearest (#5fd7ff, index 81) and no background.
    assert shown(article) == [(("ansi-fg-31",), "R"), (("ansi-fg-c81",), "T"),
                              (("ansi-underline",), "U"), (("ansi-italic",), "I"),
                              (("ansi-reverse",), "V"), ((), "\n")]
    style = "(e, name) => getComputedStyle(e)[name]"
    assert out.locator("span.ansi-fg-c81").evaluate(style, "color") == "rgb(95, 215, 255)"
    assert out.locator("span.ansi-underline").evaluate(style, "textDecorationLine") == "underline"
    assert out.locator("span.ansi-italic").evaluate(style, "fontStyle") == "italic"
    reverse = out.locator("span.ansi-reverse")
    plain = out.evaluate(style, "color")
    assert reverse.evaluate(style, "backgroundColor") == plain


def test_a_clear_of_the_screen_in_a_later_piece_leaves_only_what_follows_it(
        open_terminal: OpenTerminal) -> None:
    term, article = run_in_new_session(
        open_terminal, r"printf 'old\n'; sleep 1; printf '\033[H\033[2Jnew\n'", wait=False)
    term.expect(article.locator("pre.out")).to_contain_text(re.compile("old|new"))
    term.wait_finished(article)
    term.expect(article.locator("pre.out")).to_have_text("new\n")
    assert shown(article) == [((), "new\n")]
