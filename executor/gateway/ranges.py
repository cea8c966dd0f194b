"""Paging as PostgREST pages: `limit`/`offset`, the `Range` header (GET only,
`Range-Unit: items`), `Prefer: count=…`, and the answer's `Content-Range`
with 200, 206 or 416.

The window asked for is the intersection of the Range header and
limit/offset. `Content-Range` is `first-last/total`, `*` standing for an
empty page or a total not counted; a counted total makes a page that does
not hold all of it 206, and an offset past the end 416 (PGRST103). A bound
past a bigint (what SQL's OFFSET and LIMIT take) is 400 (PGRST100).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from executor.errors import ApiError
from executor.gateway.grammar import BIGINT_MAX, bigint

_RANGE = re.compile(r"\s*(?:items=)?(\d+)-(\d*)\s*")
_COUNT = re.compile(r"\bcount=(exact|planned|estimated)\b")


class RangeNotSatisfiable(ApiError):
    """416 (PGRST103); ``total`` goes into the answer's Content-Range when known."""

    def __init__(self, details: str, total: int | None = None) -> None:
        super().__init__("Requested range not satisfiable", "PGRST103", 416, details)
        self.total = total


@dataclass(frozen=True)
class Window:
    offset: int
    limit: int | None  # None: to the end


def window(method: str, range_header: str | None, offset: int, limit: int | None) -> Window:
    """The rows asked for; a Range whose end comes before its start is 416."""
    match = _RANGE.fullmatch(range_header or "") if method == "GET" else None
    if match is None:
        return Window(offset, limit)
    first = bigint(match.group(1))
    last = bigint(match.group(2)) if match.group(2) else None
    if first is None or (match.group(2) and last is None):
        raise ApiError('"failed to parse Range header"', "PGRST100", 400,
                       f"A Range's bounds may be at most {BIGINT_MAX}.")
    if last is not None and last < first:
        raise RangeNotSatisfiable(f"The range {first}-{last} ends before it starts.")
    lower = max(first, offset)
    ends = [e for e in (last, offset + limit - 1 if limit is not None else None) if e is not None]
    if not ends:
        return Window(lower, None)
    return Window(lower, max(min(ends) - lower + 1, 0))


def count_preference(prefer: str) -> Literal["exact", "planned"] | None:
    """`estimated` is exact below db-max-rows in PostgREST; this gateway sets no such cap."""
    match = _COUNT.search(prefer)
    if match is None:
        return None
    return "planned" if match.group(1) == "planned" else "exact"


def content_range(offset: int, rows: int, total: int | None) -> str:
    last = offset + rows - 1
    span = f"{offset}-{last}" if total != 0 and rows > 0 else "*"
    return f"{span}/{'*' if total is None else total}"


def status(offset: int, rows: int, total: int | None) -> int:
    if total is None:
        return 200
    if offset > total:
        raise RangeNotSatisfiable(
            f"An offset of {offset} was requested, but there are only {total} rows.", total)
    return 206 if rows < total else 200
