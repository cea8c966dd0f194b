"""Cost of the terminal's colours: shell.ansi_html over output that is
nothing but SGR escapes and one character between each, the worst case,
and shell.ansi_state over the same (what a piece of the live feed reads of
the output before it, at most 64 KiB of it: sql/migrations/0020).

The function as first written (sql/migrations/0007_live_html.sql) grew in
quadratic time; it is installed beside the current one, in a schema of its
own, so both are timed in the same run: the old one at each size up to
--old-max (its 64 KiB cut-off removed, so it does the same work), the
current one at every size. Output with carriage returns (a progress bar
redrawn in place) is laid out in cells since 0036: it is timed beside the
same bytes with each CR made a newline, which take the one-split path. The
database is built from scratch with the migration runner and dropped
afterwards.

    .venv/bin/python -m bench.ansi_html --sizes 65536,262144,1048576

Prints one JSON object per line on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import re
import time

from bench.common import REPO, Report, add_dsn_option, migrated_database, require_dsn
from executor.db.connection import Connection, connect, query

REPORT = Report("ansi_html")
REFERENCE_SCHEMA = "ansi_reference"
_FIRST = REPO / "sql" / "migrations" / "0007_live_html.sql"
_CUT_OFF = re.compile(r"    IF octet_length\(t\) > 65536 THEN\n.*?    END IF;\n", re.S)


def reference_function(*, cut_off: bool) -> str:
    """The first shell.ansi_html, as ``ansi_reference.ansi_html``; without
    its 64 KiB cut-off unless ``cut_off``."""
    text = _FIRST.read_text()
    start = text.index("CREATE FUNCTION shell.ansi_html(")
    body = text[start:text.index("$$;", start) + 3]
    if not cut_off:
        body, found = _CUT_OFF.subn("", body)
        assert found == 1, "the reference's cut-off was not found"
    return body.replace("shell.ansi_html(", f"{REFERENCE_SCHEMA}.ansi_html(", 1)


def install_reference(conn: Connection, *, cut_off: bool) -> None:
    query(conn, f"CREATE SCHEMA IF NOT EXISTS {REFERENCE_SCHEMA}")
    query(conn, reference_function(cut_off=cut_off))


def escapes(size: int) -> str:
    """About ``size`` bytes of colour changes with one letter between each,
    ending with a whole escape (an unfinished one is left out of the HTML
    since 0020, which the first version did not do)."""
    unit = "\x1b[1;31mA\x1b[0m\x1b[42mB\x1b[39;49m"
    return unit * max(1, size // len(unit))


def progress(size: int) -> str:
    """About ``size`` bytes of a coloured progress bar redrawn with CR."""
    units = [f"\r\x1b[32m{'#' * (n % 40)}\x1b[0m{' ' * (40 - n % 40)} {n % 100:3d}%"
             for n in range(100)]
    text = "".join(units)
    return text * max(1, size // len(text)) + "\n"


def seconds(conn: Connection, function: str, text: str) -> tuple[float, int]:
    started = time.perf_counter()
    rows = query(conn, f"SELECT octet_length({function}(%s)) AS n", (text,))
    return time.perf_counter() - started, int(rows[0]["n"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_dsn_option(parser)
    parser.add_argument("--sizes", default="65536,262144,1048576",
                        help="output sizes in bytes, comma-separated")
    parser.add_argument("--old-max", type=int, default=262144,
                        help="largest size the old (quadratic) function is timed at")
    args = parser.parse_args()
    dsn = require_dsn(parser, args)
    sizes = [int(s) for s in args.sizes.split(",")]
    with migrated_database(dsn, "bench_ansi", REPORT.log) as db:
        conn = connect(db)
        try:
            install_reference(conn, cut_off=False)
            for size in sizes:
                text = escapes(size)
                new_s, new_len = seconds(conn, "shell.ansi_html", text)
                REPORT.emit_figure("render_s", new_s, "s", size_bytes=size, version="linear",
                                   html_bytes=new_len)
                state_s, _ = seconds(conn, "shell.ansi_state", text)
                REPORT.emit_figure("state_s", state_s, "s", size_bytes=size)
                bar = progress(size)
                laid_s, laid_len = seconds(conn, "shell.ansi_html", bar)
                split_s, _ = seconds(conn, "shell.ansi_html", bar.replace("\r", "\n"))
                REPORT.emit_figure("render_s", laid_s, "s", size_bytes=size, version="laid_out",
                                   html_bytes=laid_len, split_s=round(split_s, 4),
                                   ratio_to_split=round(laid_s / split_s, 1))
                if size <= args.old_max:
                    old_s, old_len = seconds(conn, f"{REFERENCE_SCHEMA}.ansi_html", text)
                    assert old_len == new_len, (old_len, new_len)
                    REPORT.emit_figure("render_s", old_s, "s", size_bytes=size,
                                       version="quadratic", html_bytes=old_len,
                                       ratio_old_to_new=round(old_s / new_s, 1))
        finally:
            conn.close()


if __name__ == "__main__":
    main()
