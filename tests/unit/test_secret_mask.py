"""Secret values are masked in output however the stream is cut into pieces."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor.secrets.mask import MASK, SecretMask

VALUES = ["s3cr3t-token", "s3cr3t", "abcabd", "zzzz", "x" * 40 + "end"]


def streamed(mask: SecretMask, pieces: list[str]) -> str:
    return "".join(mask.feed(p) for p in pieces) + mask.flush()


@given(st.lists(st.sampled_from([*VALUES, "abc", "ab", "s3cr3t-", "zzz", "x", "x" * 35, "\n",
                                 "***"]),
                max_size=30),
       st.lists(st.integers(min_value=0, max_value=200), max_size=10))
def test_the_stream_is_masked_as_the_whole_text_would_be(words, cuts):
    text = "".join(words)
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    masked = streamed(SecretMask(VALUES), pieces)
    assert masked == SecretMask(VALUES).text(text)
    for value in VALUES:
        assert value not in masked


def test_a_value_split_across_pieces_is_held_back_until_it_is_whole():
    mask = SecretMask(["s3cr3t-token"])
    assert mask.feed("key: s3cr") == "key: "
    assert mask.feed("3t-tok") == ""
    assert mask.feed("en\nnext") == f"{MASK}\nnext"
    assert mask.flush() == ""


def test_a_value_inside_a_longer_one_is_masked_with_the_longer_across_pieces():
    mask = SecretMask(["postgres://u:pw-1234@db/x", "pw-1234"])
    assert mask.feed("url postgres://u:pw-1234") == "url "
    assert mask.feed("@db/x and pw-1234 alone") == f"{MASK} and {MASK} alone"
    assert mask.feed(" pw-12") == " " and mask.flush() == "pw-12"
    shorter_at_the_end = SecretMask(["s3cr3t-token", "s3cr3t"])
    assert shorter_at_the_end.feed("x s3cr3t") == "x " and shorter_at_the_end.flush() == MASK


def test_on_a_terminal_a_value_of_several_lines_is_masked_as_the_terminal_ends_them():
    mask = SecretMask(["-----BEGIN KEY-----\nAAAA\n-----END KEY-----"], terminal=True)
    assert mask.text("-----BEGIN KEY-----\r\nAAAA\r\n-----END KEY-----\r\n") == f"{MASK}\r\n"


def test_what_only_looked_like_a_value_comes_out_at_the_end():
    mask = SecretMask(["s3cr3t-token"])
    assert mask.feed("tail s3c") == "tail "
    assert mask.flush() == "s3c"


def test_the_longer_of_two_overlapping_values_is_masked_whole():
    assert SecretMask(["abcd", "abcdefgh"]).text("abcdefgh abcd") == f"{MASK} {MASK}"


def test_a_mask_needs_a_value():
    with pytest.raises(ValueError):
        SecretMask([])
