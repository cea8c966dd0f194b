"""Plain output as a terminal shows it (0036): shell.ansi_html against a
reference terminal emulator (pyte, with newline as the terminal driver makes
it: a carriage return too) on random streams and on what real tools print,
each case the issue's bug (CR, ESC ( B, 256 colours, truecolour, underline,
reverse, italic, `watch`); then the live feed's pieces, joined as the page
joins them (html/output.js: data-line replaces the last line, data-clear
empties the copy), show what the whole output shows."""

from __future__ import annotations

import html as html_module
import re
from collections.abc import Iterator

import pyte
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyte.graphics import BG_AIXTERM, BG_ANSI, FG_AIXTERM, FG_ANSI, FG_BG_256

from tests.db.ansi_helpers import styled
from tests.db.api_helpers import append, claim, start
from tests.support import create_user, one, tenant

COLS, ROWS = 400, 60
ATTRS = ("bold", "italic", "underline", "strike", "reverse")
Cell = tuple[str, int | None, int | None, frozenset[str]]  # char, fg, bg, attributes


def render(conn, text: str) -> str:
    return str(one(conn, "SELECT shell.ansi_html(%s)", (text,)))


# What each side shows: lines of cells, trailing blanks and blank lines dropped.

def _colour(classes: set[str], side: str) -> int | None:
    for name in classes:
        if m := re.fullmatch(rf"ansi-{side}-c(\d+)", name):
            return int(m[1])
        if m := re.fullmatch(rf"ansi-{side}-(\d+)", name):
            code = int(m[1]) - (30 if side == "fg" else 40)
            return code if code < 8 else code - 60 + 8
    return None


def shown(fragment: str) -> list[list[Cell]]:
    lines: list[list[Cell]] = [[]]
    for classes, ch in styled(fragment):
        if ch == "\n":
            lines.append([])
            continue
        names = set(classes.split())
        fg, bg = _colour(names, "fg"), _colour(names, "bg")
        if "ansi-reverse" in names:  # the server swapped them: back to what was set
            fg, bg = bg, fg
        attrs = frozenset(a for a in ATTRS if f"ansi-{a}" in names)
        lines[-1].append((ch, fg, bg, attrs))
    return _trimmed(lines)


_NAMES = {**{v: k - 30 for k, v in FG_ANSI.items() if k != 39},
          **{v: k - 82 for k, v in FG_AIXTERM.items()},
          **{v: k - 40 for k, v in BG_ANSI.items() if k != 49},
          **{v: k - 92 for k, v in BG_AIXTERM.items()}}


def _pyte_colour(value: str) -> int | None:
    if value == "default":
        return None
    if value in _NAMES:
        return _NAMES[value]
    if value in FG_BG_256[:16] and value not in FG_BG_256[16:]:
        return FG_BG_256.index(value)  # 38;5;N below 16: the named colour it is
    # Any other (truecolour too): the nearest of the cube and the greys.
    rgb = [int(value[i:i + 2], 16) for i in (0, 2, 4)]
    return min(range(16, 256), key=lambda i: sum(
        (int(FG_BG_256[i][k:k + 2], 16) - c) ** 2 for k, c in zip((0, 2, 4), rgb)))


def emulated(text: str) -> list[list[Cell]]:
    screen = pyte.Screen(COLS, ROWS)
    # "\n" as the terminal driver sends it: CR LF (not the LNM mode, which
    # a reset, ESC c, would turn off).
    pyte.Stream(screen).feed(text.replace("\n", "\r\n"))
    lines = []
    for row, shown_row in enumerate(screen.display):
        chars = shown_row.rstrip()
        line = screen.buffer[row]
        lines.append([(ch, _pyte_colour(line[x].fg), _pyte_colour(line[x].bg),
                       frozenset(a for a, attr in zip(ATTRS, ("bold", "italics", "underscore",
                                                              "strikethrough", "reverse"))
                                 if getattr(line[x], attr)))
                      for x, ch in enumerate(chars)])
    return _trimmed(lines)


def _trimmed(lines: list[list[Cell]]) -> list[list[Cell]]:
    """Trailing blanks dropped, and the look of a blank: no style."""
    out = []
    for line in lines:
        while line and line[-1][0] == " ":
            line = line[:-1]
        out.append([(ch, None, None, frozenset()) if ch == " " else (ch, fg, bg, attrs)
                    for ch, fg, bg, attrs in line])
    while out and not out[-1]:
        out.pop()
    return out


# Random streams ------------------------------------------------------------------

SGR_CODES = ["0", "1", "3", "4", "7", "9", "22", "23", "24", "27", "29", "31", "36", "39", "42",
             "49", "93", "104", "38;5;1", "38;5;200", "48;5;244", "38;2;95;135;215", "48;2;0;0;0"]
text_runs = st.text(alphabet="ab xyz<>&é", min_size=1, max_size=8)
controls = st.sampled_from(["\r", "\n", "\b", "\t", "\x1b(B", "\x1b]0;title\x07", "\x1b[?25l"])
sgr = st.lists(st.sampled_from(SGR_CODES), min_size=1, max_size=3).map(
    lambda codes: "\x1b[" + ";".join(codes) + "m")
line_moves = st.one_of(
    st.builds(lambda n, f: f"\x1b[{n}{f}", st.sampled_from(["", "0", "1", "2", "5"]),
              st.sampled_from(list("CDGX@Pa"))),  # pyte reads no CSI `
    st.sampled_from(["\x1b[K", "\x1b[0K", "\x1b[1K", "\x1b[2K"]))
screen_moves = st.one_of(
    st.builds(lambda n, f: f"\x1b[{n}{f}", st.sampled_from(["", "1", "2", "3"]),
              st.sampled_from(list("ABEFJde"))),
    st.builds(lambda r, c: f"\x1b[{r};{c}H", st.integers(1, 6), st.integers(1, 12)),
    st.just("\x1b[2J"), st.just("\x1bc"))
streams = st.lists(st.one_of(text_runs, controls, sgr, line_moves, screen_moves),
                   max_size=40).map("".join)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=streams)
def test_any_stream_shows_what_a_terminal_shows(conn, text: str) -> None:
    assert shown(render(conn, text)) == emulated(text), repr(text)
    # Laid out in cells or not, the scan leaves the same state.
    assert one(conn, "SELECT (shell.ansi_scan(%s, true)).state = shell.ansi_state(%s)",
               (text, text)), repr(text)


CAPTURED = {
    # pip, curl and apt redraw one line with CR; apt erases its end.
    "pip": "Downloading x.whl\r\n\x1b[?25l   \x1b[38;5;237m━━━━\x1b[0m 0.0/1.2 MB\r"
           "   \x1b[38;2;249;38;114m━━━━\x1b[0m 0.6/1.2 MB\r   \x1b[38;2;114;156;31m━━━━━━━━\x1b[0m"
           " 1.2/1.2 MB\n\x1b[?25h",
    "curl": "  % Total    % Received\n\r  0     0    0     0\r 45  100k   45 46080"
            "\r100  100k  100  100k\n",
    "apt": "\rReading package lists... 0%\r\rReading package lists... 100%\r\x1b[K"
           "Reading package lists... Done\r\n",
    "git": "Receiving objects:  33% (1/3)\rReceiving objects:  66% (2/3)\r"
           "Receiving objects: 100% (3/3), done.\n",
    "ls --color": "\x1b[0m\x1b[01;34mdir\x1b[0m  \x1b[01;32mrun.sh\x1b[0m  "
                  "\x1b[01;36mlink\x1b[0m\n",
    "tput": "\x1b[1mbold\x1b(B\x1b[m \x1b[4munder\x1b[24m \x1b[7mrev\x1b[27m \x1b[3mit\x1b[23m\n",
    # watch: home, clear, then each line where it goes.
    "watch": "\x1b[?1049h\x1b[1;24r\x1b[H\x1b[2JEvery 1.0s: date\x1b[1;60Hhost"
             "\x1b[3;1HFri 10:00:01\n"
             "\x1b[H\x1b[2JEvery 1.0s: date\x1b[1;60Hhost\x1b[3;1HFri 10:00:02\n",
    # procps' watch itself (TERM=xterm, no terminal): its first screen, then
    # the clock's seconds redrawn in place.
    "watch, as it writes": "\x1b[?1049h\x1b[22;0;0t\x1b[1;24r\x1b(B\x1b[m\x1b[4l\x1b[?7h"
                           "\x1b[H\x1b[2JEvery 1.0s: echo hi"
                           "\x1b[1;43H8cdbfb621e9d: Fri Dec  4 22:36:28 2026"
                           "\x1b[3;1Hhi\x1b[24;80H\x1b[1;75H9\x1b[24;80H\x1b[1;74H30\x1b[24;80H"
                           "\x1b[24;1H\x1b[?1049l\x1b[23;0;0t\r\x1b[?1l\x1b>",
}


@pytest.mark.parametrize("name", CAPTURED)
def test_what_real_tools_print_shows_as_in_a_terminal(conn, name: str) -> None:
    assert shown(render(conn, CAPTURED[name])) == emulated(CAPTURED[name])


def text_of(fragment: str) -> str:
    return html_module.unescape(re.sub(r"<[^>]*>", "", fragment))


def test_each_bug_shows_as_a_terminal_shows_it(conn) -> None:
    assert render(conn, "abc\rX") == "Xbc"
    assert render(conn, "\x1b[1mbold\x1b(B\x1b[m") == '<span class="ansi-bold">bold</span>'
    assert render(conn, "\x1b[38;5;1mred") == '<span class="ansi-fg-31">red</span>'
    assert render(conn, "\x1b[38;2;100;200;255mblue") == '<span class="ansi-fg-c81">blue</span>'
    assert render(conn, "\x1b[38:2::100:200:255mblue") == '<span class="ansi-fg-c81">blue</span>'
    assert render(conn, "\x1b[4:3mcurly\x1b[4:0m") == '<span class="ansi-underline">curly</span>'
    assert render(conn, "\x1b[31;7mrev") == '<span class="ansi-bg-41 ansi-reverse">rev</span>'
    assert text_of(render(conn, CAPTURED["watch"])) == (
        "Every 1.0s: date" + " " * 43 + "host\n\nFri 10:00:02\n")


def test_the_state_carries_every_attribute_and_extended_colours(conn) -> None:
    state = one(conn, "SELECT shell.ansi_state(%s)", ("\x1b[1;3;4;38;5;200;48;2;0;0;0mx",))
    assert state == "\x1b[1;3;4;38;5;200;48;5;16m"
    assert one(conn, "SELECT shell.ansi_state(%s)", ("\x1b[31mx\x1bc",)) == ""


def test_no_escape_makes_output_far_larger_than_itself(conn) -> None:
    # Cursor moves stop at the margin, inserts lose what they push past it.
    for hostile in ("\x1b[999C\x1b[999Bx" * 2000, "x\x1b[999@" * 2000, "\x1b[999;999Hx" * 2000):
        size = one(conn, "SELECT octet_length(shell.ansi_html(%s))", (hostile,))
        assert size <= 2 * 1000 * 1000, (hostile[:12], size)


# The live feed's pieces -------------------------------------------------------------

_PRE = re.compile(r'<pre class="out" data-from="(\d+)" data-end="(\d+)" data-bytes="(\d+)"'
                  r'((?: data-line="\d+"| data-clear)*)>\n?(.*?)</pre>', re.S)


def page_join(copy: list[tuple[str, str]], attrs: str, inner: str) -> list[tuple[str, str]]:
    """What html/output.js makes of its copy (as ``styled`` runs) and a piece."""
    if "data-clear" in attrs:
        copy = []
    elif "data-line" in attrs:
        text = "".join(ch for _, ch in copy)
        copy = copy[:text.rfind("\n") + 1]
    return copy + styled(inner)


class Stream:
    """A running command of a new user's: ``send(text)`` appends a chunk and
    returns the attributes and inner HTML of the feed's piece after it."""

    def __init__(self, db: str, user: str) -> None:
        self.db = db
        self.user = tenant(db, create_user(db, user))
        self.session = one(self.user, "SELECT shell_api.create_session('screen')")
        self.command_id = one(self.user, "SELECT shell_api.submit_command(%s, 'progress')",
                              (self.session,))
        self.attempt = claim(db, self.command_id)
        start(db, self.command_id, self.attempt)
        self.seq = 0

    def send(self, text: str) -> tuple[str, str]:
        cursor = one(self.user, "SELECT shell_api.session_cursor(%s)", (self.session,))
        append(self.db, self.command_id, self.attempt, self.seq, text)
        self.seq += 1
        listing = one(self.user, "SELECT shell_api.session_changes_html(%s, %s, 100, true)",
                      (self.session, cursor))
        [piece] = _PRE.findall(listing)
        return piece[3], piece[4]


@pytest.fixture
def stream(db: str) -> Iterator[Stream]:
    feed = Stream(db, "alice")
    yield feed
    feed.user.close()


def joined(stream, chunks: list[str]) -> list[tuple[str, str]]:
    copy: list[tuple[str, str]] = []
    for chunk in chunks:
        copy = page_join(copy, *stream.send(chunk))
    return copy


def test_a_progress_bar_in_pieces_shows_its_last_state(conn, stream) -> None:
    chunks = ["working\n 10%", "\r 50%", "\r 90%\x1b[", "K\r100% done", "\nnext\r", "N"]
    assert joined(stream, chunks) == styled(render(conn, "".join(chunks)))
    assert text_of(render(conn, "".join(chunks))) == "working\n100% done\nNext"


def test_a_piece_that_starts_with_a_newline_or_return_keeps_it(conn, stream) -> None:
    assert "".join(ch for _, ch in joined(stream, ["a", "\nb", "\rc"])) == "a\nc"


def test_a_clear_in_a_piece_empties_what_the_page_shows(conn, stream) -> None:
    chunks = ["old\nlines\n", "\x1b[H\x1b[", "2Jnew\n", "\x1b[H\x1b[2Jnewer\n"]
    assert "".join(ch for _, ch in joined(stream, chunks)) == "newer\n"


# Line-local controls only: a move above the line a piece continues is not
# carried across pieces (the whole output shows it).
line_streams = st.lists(st.one_of(text_runs, st.sampled_from(["\r", "\n", "\b", "\t"]), sgr,
                                  line_moves), min_size=1, max_size=30).map("".join)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=line_streams, cuts=st.lists(st.integers(1, 200), max_size=5))
def test_any_cuts_of_a_stream_join_on_the_page_to_the_whole(conn, db: str, text: str,
                                                              cuts: list[int]) -> None:
    feed = Stream(db, f"cut{abs(hash((text, tuple(cuts))))}")
    try:
        bounds = sorted({c for c in cuts if c < len(text)} | {0, len(text)})
        assert joined(feed, [text[a:b] for a, b in zip(bounds, bounds[1:])]) == styled(
            render(conn, text)), (text, bounds)
    finally:
        feed.user.close()
