"""Reading the output HTML the database renders (shell.ansi_html, the
listings' <pre class="out">) as what a person sees: each character with the
colour classes it is shown in."""

from __future__ import annotations

import html
import re

_RUN = re.compile(r'<span class="([^"<>]*)">([^<]*)</span>|([^<]+)')
_PRE = re.compile(r'<pre class="out" data-from="(\d+)" data-end="(\d+)" data-bytes="(\d+)"[^>]*>'
                  r'\n?(.*?)</pre>', re.S)  # a parser drops a newline after <pre>


def styled(fragment: str) -> list[tuple[str, str]]:
    """(classes, character) for every character ``fragment`` shows; fails on
    anything but text and colour spans (no tag is ever left half-open)."""
    shown: list[tuple[str, str]] = []
    at = 0
    for run in _RUN.finditer(fragment):
        assert run.start() == at, fragment[at:at + 80]
        at = run.end()
        classes, text = (run[1], run[2]) if run[1] is not None else ("", run[3])
        assert text, fragment[run.start():run.end()]
        shown += [(classes, ch) for ch in html.unescape(text)]
    assert at == len(fragment), fragment[at:at + 80]
    return shown


def runs(fragment: str) -> list[tuple[str, str]]:
    """``styled`` with neighbours of the same classes joined: (classes, text)."""
    joined: list[tuple[str, str]] = []
    for classes, ch in styled(fragment):
        if joined and joined[-1][0] == classes:
            joined[-1] = (classes, joined[-1][1] + ch)
        else:
            joined.append((classes, ch))
    return joined


def pieces(listing: str) -> list[tuple[int, int, int, str]]:
    """(data-from, data-end, data-bytes, inner HTML) of each output piece."""
    return [(int(m[1]), int(m[2]), int(m[3]), m[4]) for m in _PRE.finditer(listing)]
