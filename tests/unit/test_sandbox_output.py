"""Output capping and incremental decoding (pure)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from executor.sandbox.output import STDERR, STDOUT, OutputCapper, truncation_notice


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
    assert feed_all(capper,
                    [(STDOUT, b"a\xff\xfeb"), (STDOUT, b"\xe2\x82")]) == "a\ufffd\ufffdb\ufffd"


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

