"""Pure logic of the observability commands: --since, the replay verdict and
its diff, and the bounded reason label."""

from __future__ import annotations

import datetime
import io

import pytest

from executor.cli.play import play
from executor.cli.replay import compare, short_diff
from executor.cli.usage import parse_since
from executor.errors import PgShellError
from executor.metrics import reason_label

NOW = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


@pytest.mark.parametrize("text, expected", [
    ("1d", NOW - datetime.timedelta(days=1)),
    ("12h", NOW - datetime.timedelta(hours=12)),
    ("30m", NOW - datetime.timedelta(minutes=30)),
    ("2w", NOW - datetime.timedelta(weeks=2)),
    ("1.5h", NOW - datetime.timedelta(minutes=90)),
    ("2030-01-01T00:00:00+02:00", datetime.datetime(2029, 12, 31, 22, tzinfo=datetime.UTC)),
    ("2030-01-01", datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)),
])
def test_since_is_an_age_or_an_iso_time(text, expected):
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "1y", "-1d", ""])
def test_a_bad_since_is_refused_with_what_to_give(text):
    with pytest.raises(PgShellError, match="give an age"):
        parse_since(text, NOW)


def row(**overrides):
    base = {"original_id": 1, "replay_id": 2, "command": "c", "original_status": "done",
            "replay_status": "done", "original_exit_code": 0, "replay_exit_code": 0,
            "original_output": "x\n", "replay_output": "x\n", "replay_reason": None}
    return {**base, **overrides}


def test_a_replay_matches_only_with_the_same_status_exit_code_and_output():
    assert compare(row()).same and compare(row()).diff == []
    assert not compare(row(replay_exit_code=1)).same
    assert not compare(row(replay_status="failed", replay_reason="timeout")).same
    differing = compare(row(replay_output="y\n"))
    assert (differing.same, differing.exit_code_same, differing.output_same) == (False, True, False)
    assert differing.diff[-2:] == ["-x", "+y"]


def test_a_long_diff_is_cut_and_says_how_much_was_left_out():
    lines = short_diff("".join(f"{i}\n" for i in range(100)), "", limit=5)
    assert len(lines) == 6
    assert lines[-1].startswith("… (") and lines[-1].endswith("more diff lines)")


def test_reason_labels_stay_bounded():
    assert [reason_label(r)
            for r in (None, "timeout", "container failed to start: 404 no such image",
                      "engine error: boom")] == \
        ["none", "timeout", "container failed to start", "engine error"]


def test_play_at_speed_0_writes_every_chunk_in_order():
    out = io.StringIO()
    play([{"offset_ms": 0, "data": "a"}, {"offset_ms": 10**9, "data": "b"}], 0, out)
    assert out.getvalue() == "ab"
