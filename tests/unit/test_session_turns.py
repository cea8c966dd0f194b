"""A session's commands take turns on a host (executor/worker/turns.py):
the next one starts only when the last one's turn ended, other sessions
never wait, and nothing is kept for a session once its turns are over."""

from __future__ import annotations

import threading

from executor.worker.turns import SessionTurns

LIVENESS_S = 30  # a bound on waiting for another thread, never a timing claim


def test_the_next_command_of_a_session_waits_for_the_last_ones_turn() -> None:
    turns = SessionTurns()
    order: list[str] = []
    first_in, first_may_end = threading.Event(), threading.Event()

    def first() -> None:
        with turns.turn("s1"):
            first_in.set()
            assert first_may_end.wait(LIVENESS_S)
            order.append("first ends")

    def second() -> None:
        with turns.turn("s1"):
            order.append("second starts")

    one = threading.Thread(target=first)
    one.start()
    assert first_in.wait(LIVENESS_S)
    two = threading.Thread(target=second)
    two.start()
    # Another session's command runs meanwhile; this one waits (a slow
    # machine can only let a broken turn pass here, never fail a good one).
    with turns.turn("s2"):
        order.append("other session")
    two.join(0.2)
    assert two.is_alive() and order == ["other session"]
    first_may_end.set()
    one.join(LIVENESS_S)
    two.join(LIVENESS_S)
    assert order == ["other session", "first ends", "second starts"]
    assert len(turns) == 0


def test_a_turn_that_fails_ends_too() -> None:
    turns = SessionTurns()
    try:
        with turns.turn("s1"):
            raise RuntimeError("the command failed")
    except RuntimeError:
        pass
    assert len(turns) == 0
    with turns.turn("s1"):  # not left locked
        pass
