"""The wait for a load's commands (bench.common.wait_for_work) is a liveness
bound: it fails only when no command finished for its stall limit, saying how
many had, and never because the whole load took long."""

from __future__ import annotations

import itertools

import pytest

from bench.common import Stalled, wait_for_work


def test_slow_steady_progress_never_fails_however_long_it_takes() -> None:
    countdown = itertools.count(50, -1)  # one command finishes between any two looks
    heard: list[str] = []
    wait_for_work(lambda: next(countdown), 50, stall_s=0.0, every_s=0.0, report_every_s=0.0,
                  progress=heard.append)
    assert heard[-1] == "50/50 done"


def test_no_command_finishing_fails_saying_how_many_did() -> None:
    looks = iter([7, 5] + [5] * 10_000)
    with pytest.raises(Stalled) as failed:
        wait_for_work(lambda: next(looks), 9, stall_s=0.05, every_s=0.01)
    assert str(failed.value) == "no command finished for 0.05 s: 4 of 9 done, 5 unfinished"


def test_a_dead_worker_ends_the_wait() -> None:
    def died() -> None:
        raise RuntimeError("an executor died")

    with pytest.raises(RuntimeError, match="an executor died"):
        wait_for_work(lambda: 3, 3, check=died, every_s=0.0)
