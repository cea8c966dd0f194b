"""docs/configuration.md's settings table is the one the settings class generates
(ops/settings-table rewrites it), so every setting is documented, and only those."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.config import Settings
from executor.settings_doc import BEGIN, END, render_table, replace_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_documented_table_is_the_generated_one() -> None:
    text = DOC.read_text()
    assert replace_table(text, render_table()) == text, "run ops/settings-table"


def test_the_table_has_a_row_with_a_meaning_for_every_setting() -> None:
    rows = render_table().splitlines()[2:]
    assert len(rows) == len(Settings.model_fields)
    for name, row in zip(Settings.model_fields, rows, strict=True):
        assert f"`PG_SHELL_{name.upper()}`" in row
        assert row.split(" | ")[-1].strip(" |"), f"{name} has no description"


def test_replacing_needs_both_markers() -> None:
    assert replace_table(f"a\n{BEGIN}\nold\n{END}\nb", "new\n") == f"a\n{BEGIN}\nnew\n{END}\nb"
    with pytest.raises(ValueError, match="markers"):
        replace_table("no markers here", "new\n")
