"""shell.ansi_html in linear time renders what the first version did
(bench/ansi_html.py installs that one as the reference), and keeps the
colours of output of any size, for the escapes that version read. Two
differences are meant (0020): an escape the text stops inside is left out
(the next piece of the output renders it, tests/db/test_ansi_pieces.py), and
ESC ESC is a lone ESC and the start of the next escape."""

from __future__ import annotations

import random
import re

import psycopg2
import pytest

from bench.ansi_html import REFERENCE_SCHEMA, escapes, reference_function
from tests.support import call, one

# Escapes the first version read as the terminal does (the others, 256
# colours, attributes past bold, clears and cursor moves, and < = > as a
# control sequence's parameters, are read since 0036:
# tests/db/test_terminal_rendering.py).
PIECES = ["\x1b[31m", "\x1b[1;42m", "\x1b[0m", "\x1b[m", "\x1b[;1m", "\x1b[39;49m", "\x1b[22m",
          "\x1b[97;104m", "\x1b[?25l", "\x1b]0;title\x07", "\x1b]2;t",
          "\x1b", " <b>", "&amp;", "'\"", "plain text ", "\n", "é ✓ ", "\x1b[", "[31m"]


@pytest.fixture
def conn(db):
    connection = psycopg2.connect(db)
    connection.autocommit = True
    call(connection, f"CREATE SCHEMA {REFERENCE_SCHEMA}")
    call(connection, reference_function(cut_off=True))
    yield connection
    connection.close()


# The first version's input with the meant differences taken out: ESCs
# followed by an ESC, then an unfinished escape at the end.
ESC_BEFORE_ESC = re.compile(r"\x1b(?=\x1b)")
UNFINISHED = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*|\][^\x07\x1b]*)?\Z")


def both(conn, text: str) -> tuple[str, str]:
    first = UNFINISHED.sub("", ESC_BEFORE_ESC.sub("", text))
    row = call(conn, f"SELECT shell.ansi_html(%s) AS new, {REFERENCE_SCHEMA}.ansi_html(%s) AS old",
               (text, first))[0]
    return row["new"], row["old"]


def test_the_same_html_as_the_first_version_for_every_mix_of_escapes(conn):
    rng = random.Random(12)
    cases = ["", "no escapes <here>", "\x1b[31mred\x1b[0m plain", "\x1b[1mbold", "end\x1b[",
             "\x1b[31m\x1b[42m\x1b[1mall\x1b[22mnot bold\x1b[39mno fg\x1b[49m", escapes(60000)]
    cases += ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 60))) for _ in range(300)]
    for text in cases:
        new, old = both(conn, text)
        assert new == old, repr(text)
    assert both(conn, "\x1b[31mred\x1b[0m")[0] == '<span class="ansi-fg-31">red</span>'


def test_output_past_64_kib_keeps_its_colours(conn):
    text = "\x1b[32m" + "x" * 70000 + "\x1b[0m<end>"
    html = one(conn, "SELECT shell.ansi_html(%s)", (text,))
    assert html == '<span class="ansi-fg-32">' + "x" * 70000 + "</span>&lt;end&gt;"
    # The first version dropped every colour past 64 KiB.
    assert one(conn, f"SELECT {REFERENCE_SCHEMA}.ansi_html(%s)", (text,)) == (
        "x" * 70000 + "&lt;end&gt;")
