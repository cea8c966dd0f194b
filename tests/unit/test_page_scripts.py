"""The page's JavaScript is ES modules (issue 22): index.html loads htmx, a
vendored classic script, and one entry module of ours; every other module
is reached by import, so none of ours shares a name through the global
scope."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

HTML = Path(__file__).resolve().parents[2] / "html"


class Scripts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.found.append(dict(attrs))


def page_scripts() -> list[dict[str, str | None]]:
    parser = Scripts()
    parser.feed((HTML / "index.html").read_text())
    return parser.found


def test_every_script_of_ours_is_a_module_and_only_vendored_ones_are_classic() -> None:
    scripts = page_scripts()
    assert all(s.get("src") for s in scripts), "no inline scripts (the CSP refuses them)"
    classic = [s["src"] for s in scripts if s.get("type") != "module"]
    ours = [s["src"] for s in scripts if s.get("type") == "module"]
    assert classic == ["vendor/htmx-2.0.11.min.js"]
    assert ours == ["main.js"]


def test_every_module_of_ours_is_imported_from_the_entry() -> None:
    ours = {p.relative_to(HTML).as_posix() for p in HTML.rglob("*.js")
            if "vendor" not in p.relative_to(HTML).parts}
    reached: set[str] = set()
    todo = ["main.js"]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        text = (HTML / name).read_text()
        for target in re.findall(r'^import (?:[^"]*? from )?"(\.[^"]+)";', text, re.M):
            path = (HTML / name).parent.joinpath(target).resolve().relative_to(HTML.resolve())
            todo.append(path.as_posix())
    assert ours - reached == set()


def test_no_module_of_ours_sets_a_global_or_runs_in_sloppy_classic_style() -> None:
    for path in HTML.rglob("*.js"):
        if "vendor" in path.relative_to(HTML).parts:
            continue
        text = path.read_text()
        assert not re.search(r"\b(window|globalThis|self)\.\w+\s*=[^=]", text), path
        assert '"use strict"' not in text, path  # modules are strict already
