"""Content negotiation: the answer's media type from the Accept header, as
PostgREST picks it (by q, then by position; `*/*` is JSON)."""

from __future__ import annotations

import pytest

from executor.gateway.media import HTML, JSON, OCTET_STREAM, preferred

BYTES = {OCTET_STREAM}


@pytest.mark.parametrize(("accept", "offered", "chosen"), [
    (None, BYTES, JSON),
    ("", BYTES, JSON),
    ("application/octet-stream", BYTES, OCTET_STREAM),
    ("Application/Octet-Stream", BYTES, OCTET_STREAM),  # media types are case-insensitive
    ("application/octet-stream", set(), JSON),  # not offered: JSON, the representation of all
    ("application/json, application/octet-stream", BYTES, JSON),  # equal q: the first listed
    ("application/octet-stream, application/json", BYTES, OCTET_STREAM),
    ("application/json;q=0.5, application/octet-stream", BYTES, OCTET_STREAM),
    ("application/octet-stream; q=0.2, application/json; q=0.9", BYTES, JSON),
    ("application/octet-stream;q=0, */*", BYTES, JSON),  # q=0 refuses it
    ("*/*", BYTES, JSON),
    ("image/png, application/octet-stream;q=0.1", BYTES, OCTET_STREAM),  # skips what is not offered
    ("text/html", {HTML}, HTML),
    ("text/html", BYTES, JSON),
    ("application/octet-stream;q=abc, text/html", {HTML}, HTML),  # a bad q counts as 0
])
def test_the_most_preferred_offered_type_wins(accept, offered, chosen):
    assert preferred(accept, offered) == chosen
