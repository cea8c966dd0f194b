"""Output capping, incremental decoding and state-marker extraction (pure)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from executor.sandbox.output import (
    MAX_STATE_BYTES,
    STDERR,
    STDOUT,
    OutputCapper,
    StateExtractor,
    state_end_marker,
    state_marker,
    truncation_notice,
)

NONCE = "0123abcd"


def feed_all(capper: OutputCapper, frames: list[tuple[int, bytes]]) -> str:
    return "".join(capper.feed(s, d) for s, d in frames) + capper.finish()


def test_under_the_cap_everything_passes() -> None:
    capper = OutputCapper(100)
    assert feed_all(capper, [(STDOUT, b"out\n"), (STDERR, b"err\n")]) == "out\nerr\n"
    assert (capper.total_bytes, capper.truncated) == (8, False)


def test_exactly_the_cap_is_not_truncated() -> None:
    capper = OutputCapper(4)
    assert feed_all(capper, [(STDOUT, b"abcd")]) == "abcd"
    assert capper.truncated is False


def test_over_the_cap_cuts_marks_and_counts_the_rest() -> None:
    capper = OutputCapper(5)
    out = feed_all(capper, [(STDOUT, b"abc"), (STDOUT, b"defgh"), (STDERR, b"ijk")])
    assert out == "abcde" + truncation_notice(5)
    assert out.endswith("\n[pg-shell: output truncated at 5 bytes]\n")
    assert (capper.total_bytes, capper.kept_bytes, capper.truncated) == (11, 5, True)


def test_multibyte_split_across_frames_is_decoded_whole() -> None:
    euro = "€".encode()
    capper = OutputCapper(100)
    frames = [(STDOUT, euro[:1]), (STDERR, b"e"), (STDOUT, euro[1:2]), (STDOUT, euro[2:] + b"\n")]
    assert feed_all(capper, frames) == "e€\n"


def test_invalid_bytes_are_replaced() -> None:
    capper = OutputCapper(100)
    assert feed_all(capper, [(STDOUT, b"a\xff\xfeb"), (STDOUT, b"\xe2\x82")]) == "a\ufffd\ufffdb\ufffd"


@given(st.binary(max_size=300), st.integers(min_value=1, max_value=50), st.integers(0, 2**32))
def test_any_split_decodes_like_the_whole(data: bytes, cap: int, seed: int) -> None:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, 5)))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
    capper = OutputCapper(10_000)
    assert feed_all(capper, [(STDOUT, p) for p in pieces]) == data.decode("utf-8", "replace")
    small = OutputCapper(cap)
    out = feed_all(small, [(STDOUT, p) for p in pieces])
    assert small.truncated == (len(data) > cap)
    assert small.kept_bytes == min(len(data), cap)
    assert small.total_bytes == len(data)
    if small.truncated:
        assert out.endswith(truncation_notice(cap))


def extract(frames: list[bytes]) -> tuple[bytes, bytes | None]:
    ex = StateExtractor(NONCE)
    out = b"".join(ex.feed(f) for f in frames) + ex.finish()
    return out, ex.state_bytes()


def test_marker_is_cut_out_and_state_kept() -> None:
    out, state = extract([b"hello\n" + state_marker(NONCE) + b"/x\0A=1\0" + state_end_marker(NONCE)])
    assert (out, state) == (b"hello\n", b"/x\0A=1\0")


def test_a_report_without_its_end_marker_is_no_report() -> None:
    assert extract([state_marker(NONCE) + b"/x\0"]) == (b"", None)


def test_marker_split_across_every_position_is_found() -> None:
    stream = b"out" + state_marker(NONCE) + b"/x\0" + state_end_marker(NONCE)
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            assert extract([stream[:i], stream[i:j], stream[j:]]) == (b"out", b"/x\0")


def test_marker_with_another_nonce_is_output() -> None:
    fake = state_marker("ffffffff") + b"{}\n"
    assert extract([b"a", fake]) == (b"a" + fake, None)


def test_partial_marker_at_end_is_released_as_output() -> None:
    partial = state_marker(NONCE)[:7]
    assert extract([b"x", partial]) == (b"x" + partial, None)


def test_ordinary_text_is_not_held_back() -> None:
    ex = StateExtractor(NONCE)
    assert ex.feed(b"line one\n") == b"line one\n"
    assert ex.feed(b"no newline") == b"no newline"


def test_oversized_state_is_flagged_and_bounded() -> None:
    ex = StateExtractor(NONCE)
    ex.feed(state_marker(NONCE))
    for _ in range(3):
        ex.feed(b"x" * MAX_STATE_BYTES)
    assert ex.state_overflow is True
    assert ex.state_bytes() is None
