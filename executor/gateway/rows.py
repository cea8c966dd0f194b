"""A set-returning function's answer, the way PostgREST gives it: the
grammar (grammar.py) and paging (ranges.py) turned into one row query, and
its page as JSON, one JSON object (`application/vnd.pgrst.object+json`) or
CSV, with `Content-Range` always and 206/406/416 where PostgREST says so."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from executor.db.gateway import API_SCHEMA, RpcFunction
from executor.db.row_query import RowPage, RowQuery, function_source
from executor.errors import ApiError
from executor.gateway import media, ranges
from executor.gateway.grammar import Parser

CSV = "text/csv"
OBJECT = "application/vnd.pgrst.object+json"
_OBJECT_SHORT = "application/vnd.pgrst.object"


@dataclass(frozen=True)
class RowPlan:
    query: RowQuery
    keys: tuple[str, ...]  # the answer's key for each selected column, in order
    representation: str  # media.JSON, OBJECT or CSV

    @property
    def max_rows(self) -> int | None:
        """Rows worth reading: one object needs only to know whether a second
        row exists (the database counts the rest for the refusal)."""
        return 2 if self.representation == OBJECT else None

    def check(self, page: RowPage) -> None:
        """Refuses a page PostgREST would refuse; runs before the transaction commits."""
        ranges.status(self.query.offset, len(page), page.total)
        if self.representation == OBJECT and len(page) != 1:
            rows = len(page) if page.counted is None else page.counted
            raise ApiError("JSON object requested, multiple (or no) rows returned", "PGRST116",
                           406, f"The result contains {rows} rows")


def plan(fn: RpcFunction, columns: tuple[str, ...], args: dict[str, Any],
         params: Iterable[tuple[str, str]], method: str, headers: Mapping[str, str]) -> RowPlan:
    grammar = Parser(fn.name, columns).parse(params)
    window = ranges.window(method, headers.get("range"), grammar.offset, grammar.limit)
    chosen = media.preferred(headers.get("accept"), {CSV, OBJECT, _OBJECT_SHORT})
    representation = OBJECT if chosen == _OBJECT_SHORT else chosen
    call = function_source(API_SCHEMA, fn.name, args, dict(zip(fn.arg_names, fn.arg_types)))
    query = RowQuery(call, tuple(column for _key, column in grammar.select.fields),
                     grammar.where, grammar.order, window.offset, window.limit,
                     csv=representation == CSV,
                     count=ranges.count_preference(headers.get("prefer", "")))
    return RowPlan(query, tuple(key for key, _column in grammar.select.fields), representation)


def encoder(row_plan: RowPlan, dump: Callable[[Any], str]) -> Callable[[Any], bytes]:
    """One row as it goes into the answer: a JSON object (``dump``) keyed as
    the request named the columns, or a CSV line; UTF-8."""
    if row_plan.representation == CSV:
        return lambda line: str(line).encode()
    keys = row_plan.keys

    def encode(row: dict[str, Any]) -> bytes:
        return dump(dict(zip(keys, (row[f"c{i}"] for i in range(len(keys)))))).encode()
    return encode


def respond(row_plan: RowPlan, page: RowPage) -> Response:
    """The answer to a page of encoded rows (encoder). A page cut short by
    the byte budget is 206, and its Content-Range says where to continue."""
    offset = row_plan.query.offset
    headers = {"Content-Range": ranges.content_range(offset, len(page), page.total)}
    status = 206 if page.cut else ranges.status(offset, len(page), page.total)
    if row_plan.representation == CSV:
        body = b"\n".join([",".join(row_plan.keys).encode(), *page.rows])
        return Response(body, status, headers, media_type=f"{CSV}; charset=utf-8")
    if row_plan.representation == OBJECT:
        return Response(page.rows[0], status, headers, media_type=f"{OBJECT}; charset=utf-8")
    return Response(b"[" + b",".join(page.rows) + b"]", status, headers,
                    media_type="application/json; charset=utf-8")
