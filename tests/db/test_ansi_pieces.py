"""Colours across the edges of pieces (0020_colours_across_pieces): a piece
of output rendered after shell.ansi_state of the output before it shows what
the whole output shows there, and an escape split at an edge leaves nothing
stray on either side. First through the SQL functions, then through the live
feed's tails (session_changes_html with p_tail) as the page reads them,
including the window of output a tail looks back over and the byte budget."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from tests.db.ansi_helpers import pieces, runs, styled
from tests.db.api_helpers import append, claim, run, sqlstate, start
from tests.db.test_ansi_html import PIECES
from tests.support import call, create_user, one, tenant

WINDOW = 65536  # render_piece's colour_window
MIB = 1024 * 1024
PASS_FAIL = "ok \x1b[1;32mPASSED\x1b[0m then \x1b[31mFAILED\x1b[0m\n"
PASS_FAIL_RUNS = [("", "ok "), ("ansi-fg-32 ansi-bold", "PASSED"), ("", " then "),
                  ("ansi-fg-31", "FAILED"), ("", "\n")]


def html(conn, text: str) -> str:
    return str(one(conn, "SELECT shell.ansi_html(%s)", (text,)))


def state(conn, text: str) -> str:
    return str(one(conn, "SELECT shell.ansi_state(%s)", (text,)))


def in_pieces(conn, text: str, cuts: list[int]) -> list[str]:
    """The HTML of each piece of ``text`` cut at these character positions,
    rendered as render_piece does: after the state of all the text before."""
    bounds = [0, *cuts, len(text)]
    return [str(r["html"]) for r in call(
        conn, "SELECT shell.ansi_html(shell.ansi_state(left(%(t)s, a))"
              " || substr(%(t)s, a + 1, b - a)) AS html"
              " FROM unnest(%(a)s::int[], %(b)s::int[]) WITH ORDINALITY AS u(a, b, i)"
              " ORDER BY i", {"t": text, "a": bounds[:-1], "b": bounds[1:]})]


def test_the_state_is_the_colours_in_force_as_one_sgr_and_the_escape_the_text_stops_inside(
        conn) -> None:
    cases = {
        "": "",
        "plain <text>\n": "",
        "\x1b[32mPASS": "\x1b[32m",
        "\x1b[1;32mPASSED\x1b[0m": "",
        "\x1b[1;32mPASSED\x1b[m": "",
        "\x1b[1m\x1b[31m\x1b[44mx": "\x1b[1;31;44m",
        "\x1b[1;31;44mx\x1b[22m": "\x1b[31;44m",
        "\x1b[1;31;44mx\x1b[39m": "\x1b[1;44m",
        "\x1b[97;104mx\x1b[49m": "\x1b[97m",
        "\x1b[31m\x1b[2J\x1b[?25l": "\x1b[31m",  # other escapes change nothing
        "\x1b[32mA\x1b[3": "\x1b[32m\x1b[3",
        "\x1b[32mA\x1b[1;": "\x1b[32m\x1b[1;",
        "A\x1b": "\x1b",
        "A\x1b[": "\x1b[",
        "\x1b[?25": "\x1b[?25",
        "\x1b[31mA\x1b]0;tit": "\x1b[31m\x1b]0;tit",
        "\x1b]0;title\x07": "",
        "\x1b[31mA\x1b[3\n": "\x1b[31m",  # not at the end: it is finished (as text)
    }
    for text, expected in cases.items():
        assert state(conn, text) == expected, repr(text)


def test_the_html_leaves_out_only_an_escape_the_text_stops_inside(conn) -> None:
    assert html(conn, "end\x1b[3") == "end"
    assert html(conn, "end\x1b[1;3") == "end"
    assert html(conn, "end\x1b") == "end"
    assert html(conn, "end\x1b]0;half a ti") == "end"
    assert html(conn, "\x1b[32mPASS\x1b[") == '<span class="ansi-fg-32">PASS</span>'
    # Finished, or not at the end: as before.
    assert html(conn, "a\x1b[3\nb") == "a3\nb"
    assert html(conn, "a\x1b[?25lb\x1b]0;t\x07c") == "abc"


def test_esc_esc_is_a_lone_esc_then_the_next_escape_as_a_terminal_reads_it(conn) -> None:
    # Cut between the two, the pieces show the same (the first version
    # showed "]0;t" here: it took the second ESC as the first one's end).
    assert html(conn, "a\x1b\x1b]0;t\x07b") == "ab"
    assert html(conn, "a\x1b\x1b[?25lb") == "ab"
    assert "".join(in_pieces(conn, "a\x1b\x1b]0;t\x07b", [2])) == "ab"


def test_a_colour_set_before_a_piece_colours_it(conn) -> None:
    first, second = in_pieces(conn, "\x1b[32mPASS\x1b[0m ED", [len("\x1b[32mPA")])
    assert first == '<span class="ansi-fg-32">PA</span>'
    assert second == '<span class="ansi-fg-32">SS</span> ED'
    first, second = in_pieces(conn, "\x1b[32mPASSED\x1b[0m\n", [len("\x1b[32mPASS")])
    assert (first, second) == ('<span class="ansi-fg-32">PASS</span>',
                               '<span class="ansi-fg-32">ED</span>\n')


def test_an_escape_split_at_every_byte_leaves_nothing_stray(conn) -> None:
    start_at = PASS_FAIL.index("\x1b[1;32m")
    for cut in range(start_at, start_at + len("\x1b[1;32m") + 1):
        shown = in_pieces(conn, PASS_FAIL, [cut])
        assert runs("".join(shown)) == PASS_FAIL_RUNS, (cut, shown)
        assert shown[0] == "ok "
    # Every split of the reset too, and two splits inside one escape.
    reset_at = PASS_FAIL.index("\x1b[0m")
    for cut in range(reset_at, reset_at + len("\x1b[0m") + 1):
        assert runs("".join(in_pieces(conn, PASS_FAIL, [cut]))) == PASS_FAIL_RUNS, cut
    assert runs("".join(in_pieces(conn, PASS_FAIL, [start_at + 2, start_at + 4]))) == (
        PASS_FAIL_RUNS)


def test_a_reset_before_the_edge_leaves_the_next_piece_plain(conn) -> None:
    text = "\x1b[1;33mwarn\x1b[0m after\n\x1b[44mblue\x1b[49m off"
    for cut in range(len(text) + 1):
        assert runs("".join(in_pieces(conn, text, [cut]))) == [
            ("ansi-fg-33 ansi-bold", "warn"), ("", " after\n"), ("ansi-bg-44", "blue"),
            ("", " off")], cut
    assert in_pieces(conn, text, [text.index(" after")])[1] == " after\n<span " \
        'class="ansi-bg-44">blue</span> off'


def test_any_cuts_of_any_mix_of_escapes_show_what_the_whole_shows(conn) -> None:
    rng = random.Random(20)
    for _ in range(200):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 40)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(1, 6))))
        shown = in_pieces(conn, text, cuts)
        assert styled("".join(shown)) == styled(html(conn, text)), (text, cuts)


def test_an_sgr_code_too_long_for_an_integer_is_ignored(conn) -> None:
    assert html(conn, "\x1b[31;99999999999mred\x1b[00000000000000mplain") == (
        '<span class="ansi-fg-31">red</span>plain')
    assert state(conn, "\x1b[1;99999999999m") == "\x1b[1m"


# The live feed's tails ------------------------------------------------------------


@pytest.fixture
def stream(db: str):
    """A running command of alice's: ``stream.send(text)`` appends a chunk
    and returns the feed's tail (session_changes_html, p_tail) after it."""
    alice = tenant(db, create_user(db, "alice"))
    session = one(alice, "SELECT shell_api.create_session('colours')")
    command_id = one(alice, "SELECT shell_api.submit_command(%s, 'pytest -v')", (session,))
    attempt = claim(db, command_id)
    start(db, command_id, attempt)

    class Stream:
        seq = 0
        sent = ""

        def send(self, text: str) -> tuple[int, int, int, str]:
            cursor = one(alice, "SELECT shell_api.session_cursor(%s)", (session,))
            append(db, command_id, attempt, self.seq, text)
            self.seq += 1
            self.sent += text
            listing = one(alice, "SELECT shell_api.session_changes_html(%s, %s, 100, true)",
                          (session, cursor))
            [piece] = pieces(listing)
            raw = one(alice, "SELECT output FROM shell_api.session_changes(%s, %s, 100, true)",
                      (session, cursor))
            assert raw == text  # the JSON tail stays the raw text
            return piece

        def whole(self) -> str:
            return one(alice, "SELECT shell_api.latest_output_html(%s, 0, 1, NULL, 1048576)",
                       (session,))

    yield Stream()
    alice.close()


def test_the_feeds_tails_of_a_coloured_stream_join_to_the_whole_outputs_html(
        conn, stream) -> None:
    chunks = ["collecting \x1b[3", "2m12 items\x1b[0m\ntest_a \x1b[1", ";32mPASS", "ED\x1b",
              "[0m\ntest_b \x1b[31mFAI", "LED\x1b[0m", "\n\x1b]0;done\x07\x1b[33mwarn\x1b[0m é\n"]
    shown = []
    for chunk in chunks:
        before = len(stream.sent.encode())
        piece_from, piece_end, total, inner = stream.send(chunk)
        assert (piece_from, piece_end, total) == (before, len(stream.sent.encode()),
                                                  len(stream.sent.encode()))
        shown.append(inner)
    assert runs("".join(shown)) == [
        ("", "collecting "), ("ansi-fg-32", "12 items"), ("", "\ntest_a "),
        ("ansi-fg-32 ansi-bold", "PASSED"), ("", "\ntest_b "), ("ansi-fg-31", "FAILED"),
        ("", "\n"), ("ansi-fg-33", "warn"), ("", " é\n")]
    assert styled("".join(shown)) == styled(html(conn, stream.sent))
    [(_f, _e, _b, whole)] = pieces(stream.whole())
    assert whole == html(conn, stream.sent)


def test_a_long_stream_cut_anywhere_joins_to_the_whole_outputs_html(conn, stream) -> None:
    rng = random.Random(7)
    lines = []
    for i in range(3000):
        colour = rng.choice(["\x1b[32m", "\x1b[1;31m", "\x1b[33;44m", ""])
        lines.append(f"{colour}test_{i} é{'.' * rng.randint(0, 60)}"
                     + rng.choice(["\x1b[0m", "\x1b[39m", "", "\x1b[22m"]) + "\n")
    text = "".join(lines)  # about 140 KiB, colours held across lines
    shown, at = [], 0
    while at < len(text):
        size = rng.randint(1, 20000)
        shown.append(stream.send(text[at:at + size])[3])
        at += size
    assert len(shown) > 10
    assert styled("".join(shown)) == styled(html(conn, text))


def test_a_tail_sees_colours_set_up_to_64_kib_before_it_and_no_further(conn, db: str) -> None:
    def tail(before: str, after: str = "after") -> str:
        alice = tenant(db, create_user(db, f"u{len(before)}"))
        session = one(alice, "SELECT shell_api.create_session('w')")
        command_id = one(alice, "SELECT shell_api.submit_command(%s, 'x')", (session,))
        attempt = claim(db, command_id)
        start(db, command_id, attempt)
        append(db, command_id, attempt, 0, before)
        cursor = one(alice, "SELECT shell_api.session_cursor(%s)", (session,))
        append(db, command_id, attempt, 1, after)
        [piece] = pieces(one(alice, "SELECT shell_api.session_changes_html(%s, %s, 100, true)",
                             (session, cursor)))
        alice.close()
        return piece[3]

    # The escape is the window's first five bytes: seen.
    assert tail("\x1b[31m" + "x" * (WINDOW - 5)) == '<span class="ansi-fg-31">after</span>'
    # It starts one byte before the window: not seen, and the rest of it
    # ("[31m", inside the window) shows nowhere.
    assert tail("\x1b[31m" + "x" * (WINDOW - 4)) == "after"
    # The window starts inside a two-byte character (an odd number of bytes
    # into the run of "é"), after a colour or before one.
    assert tail("\x1b[31m" + "é" * 40000 + "\x1b[32m" + "é" * 30000) == (
        '<span class="ansi-fg-32">after</span>')
    assert tail("\x1b[32m" + "é" * 40000 + "z") == "after"
    # An escape split at the piece's start is carried from there too.
    assert tail("\x1b[31m" + "é" * 40000 + "\x1b[1;3", "2mafter") == (
        '<span class="ansi-fg-32 ansi-bold">after</span>')


def test_the_colour_a_tail_starts_in_counts_against_the_byte_budget(conn, db: str) -> None:
    budget = 8192
    call(conn, "INSERT INTO shell.config (key, value) VALUES ('listing_budget_bytes', %s)",
         (str(budget),))
    alice = tenant(db, create_user(db, "alice"))
    session = one(alice, "SELECT shell_api.create_session('budget')")
    command_id = one(alice, "SELECT shell_api.submit_command(%s, 'x')", (session,))
    attempt = claim(db, command_id)
    start(db, command_id, attempt)
    append(db, command_id, attempt, 0, "\x1b[31m")
    shown, dropped = 0, 0
    for seq, size in enumerate(range(budget - 1200, budget, 8), start=1):
        cursor = one(alice, "SELECT shell_api.session_cursor(%s)", (session,))
        # Each chunk sets red again for the next one's window.
        append(db, command_id, attempt, seq, "r" * size + "\x1b[31m")
        listing = one(alice, "SELECT shell_api.session_changes_html(%s, %s, 100, true, %s)",
                      (session, cursor, budget))
        assert len(listing.encode()) <= budget, size
        [(piece_from, piece_end, _total, inner)] = pieces(listing)
        if piece_end > piece_from:
            assert set(styled(inner)) == {("ansi-fg-31", "r")}
            shown += 1
        else:
            assert inner == ""
            dropped += 1
    # Sizes on both sides of the edge: had the span not been counted, those
    # just past it would have gone out over the budget.
    assert shown and dropped


# read_output_html's pages ---------------------------------------------------------


@pytest.fixture
def finished(db: str):
    """``finished(output)``: a done command of alice's with that output (one
    chunk, as the executor appends it): (alice's connection, command id)."""
    alice = tenant(db, create_user(db, "alice"))
    session = one(alice, "SELECT shell_api.create_session('pages')")

    def make(output: str) -> tuple[object, int]:
        command_id = one(alice, "SELECT shell_api.submit_command(%s, 'make')", (session,))
        run(db, command_id, output)
        return alice, command_id

    yield make
    alice.close()


def html_pages(conn, command_id: int, limits: Iterator[int]) -> list[tuple[int, int, int, str]]:
    """Every page of the output through read_output_html, each asked for
    with the next of ``limits``, from where the one before ended."""
    found, offset, total = [], 0, None
    while total is None or offset < total:
        listing = one(conn, "SELECT shell_api.read_output_html(%s, %s, %s)",
                      (command_id, offset, next(limits)))
        [(start_at, end, total, inner)] = pieces(listing)
        assert start_at == offset < end, (start_at, offset, end)
        found.append((start_at, end, total, inner))
        offset = end
    return found


def test_the_pages_of_a_coloured_output_join_to_the_whole_outputs_html(conn, finished) -> None:
    rng = random.Random(11)
    lines = []
    for i in range(3000):
        colour = rng.choice(["\x1b[32m", "\x1b[1;31m", "\x1b[33;44m", "\x1b]0;t\x07", ""])
        lines.append(f"{colour}test_{i} é{'.' * rng.randint(0, 60)}"
                     + rng.choice(["\x1b[0m", "\x1b[39m", "", "\x1b[22m"]) + "\n")
    text = "".join(lines)  # about 140 KiB: pages cut inside escapes and characters
    alice, command_id = finished(text)
    pages = html_pages(alice, command_id, iter(lambda: rng.randint(1, 20000), None))
    assert len(pages) > 10
    assert pages[-1][1] == pages[-1][2] == len(text.encode())
    assert styled("".join(inner for *_, inner in pages)) == styled(html(conn, text))


def test_a_page_that_renders_past_the_budget_is_shortened_and_the_next_goes_on(
        conn, finished) -> None:
    text = "<&>" * (MIB // 3) + "\x1b[31mred\x1b[0m\n"  # 1 MiB that escapes to 4.7 MiB of HTML
    alice, command_id = finished(text)
    pages = html_pages(alice, command_id, iter(lambda: 3 * MIB, None))
    assert len(pages) > 1
    assert all(0 < len(inner.encode()) <= 3 * MIB for *_, inner in pages)
    assert styled("".join(inner for *_, inner in pages)) == styled(html(conn, text))


def test_read_output_html_refuses_what_read_output_refuses(db: str, finished) -> None:
    alice, command_id = finished("aé\n")  # é is two bytes: offset 2 is inside it
    for offset, limit in ((-1, 10), (5, 10), (2, 10), (0, 0), (0, 4 * MIB), (None, 10)):
        code, message = sqlstate(alice, "SELECT shell_api.read_output_html(%s, %s, %s)",
                                 (command_id, offset, limit))
        assert (code, message) == sqlstate(
            alice, "SELECT * FROM shell_api.read_output(%s, %s, %s)", (command_id, offset, limit))
        assert code == "22023", (offset, limit, message)
    bob = tenant(db, create_user(db, "bob"))
    assert sqlstate(bob, "SELECT shell_api.read_output_html(%s)", (command_id,)) == (
        "22023", "command not found")
    bob.close()
