"""PostgREST's query grammar and paging rules as pure functions: what a
request parses into, what it is refused with, and the SQL it becomes (values
only ever as placeholders)."""

from __future__ import annotations

import json

import pytest
from psycopg2 import sql

from executor.db.row_query import (
    Filter,
    FunctionCall,
    Logic,
    OrderTerm,
    RowQuery,
    function_source,
    page_statement,
)
from executor.errors import ApiError
from executor.gateway import ranges
from executor.gateway.grammar import Parser, is_grammar

COLUMNS = ("id", "name", "created_at")


def parse(*params: tuple[str, str]):
    return Parser("list_sessions", COLUMNS).parse(params)


def test_a_request_parses_into_columns_conditions_order_and_page():
    grammar = parse(("select", "key:id,name"), ("name", "not.like.a*"),
                    ("or", '(id.in.(1,"2,3"),and(name.is.null,created_at.gte.2026-01-01))'),
                    ("order", "created_at.desc.nullslast,name"), ("limit", "5"),
                    ("offset", "10"))
    assert grammar.select.fields == (("key", "id"), ("name", "name"))
    assert grammar.where == (
        Filter("name", "like", "a*", negated=True),
        Logic("or", (Filter("id", "in", ["1", "2,3"]),
                     Logic("and", (Filter("name", "is", "null"),
                                   Filter("created_at", "gte", "2026-01-01"))))))
    assert grammar.order == (OrderTerm("created_at", True, "last"), OrderTerm("name"))
    assert (grammar.offset, grammar.limit) == (10, 5)


@pytest.mark.parametrize("params, code", [
    ((("select", "nope"),), "42703"),
    ((("nope", "eq.1"),), "42703"),
    ((("or", "(name.eq.1,nope.eq.2)"),), "42703"),
    ((("name", "cs.{a}"),), "PGRST100"),
    ((("name", "eq(any).{a,b}"),), "PGRST100"),
    ((("or", "(name.eq.1))"),), "PGRST100"),
    ((("or", '(name.eq."open)'),), "PGRST100"),
    ((("limit", "1e3"),), "PGRST100"),
    ((("select", "a b:name"),), "PGRST100"),
])
def test_what_cannot_be_read_or_names_no_column_is_refused(params, code):
    with pytest.raises(ApiError) as refused:
        parse(*params)
    assert (refused.value.code, refused.value.status) == (code, 400)


def test_get_parameters_are_grammar_only_when_they_read_as_grammar():
    assert is_grammar("select", "id")
    assert is_grammar("name", "eq.x")
    assert is_grammar("name", "not.in.(a)")
    assert not is_grammar("p_session_id", "5d1c4a4e-0000-0000-0000-000000000000")
    assert not is_grammar("p_limit", "20")


def test_request_text_reaches_sql_only_as_parameters():
    query = RowQuery(FunctionCall(sql.SQL("shell_api.list_sessions()"), [], "{}"), ("name", "id"),
                     (Filter("name", "eq", "x'; DROP TABLE t; --"),
                      Logic("or", (Filter("id", "in", ["a", "b"]), Filter("name", "like", "*%")),
                            negated=True)),
                     (OrderTerm("name", True, "first"),), offset=3, limit=2, count="exact")
    statement, params = page_statement(query)
    text = repr(statement)  # the composed SQL: identifiers and fixed text only
    assert "DROP" not in text
    assert params == ["x'; DROP TABLE t; --", "a", "b", "%%", 2, 3]


@pytest.mark.parametrize("method, header, offset, limit, expected", [
    ("GET", None, 0, None, (0, None)),
    ("GET", "2-5", 0, None, (2, 4)),
    ("GET", "2-", 0, 3, (2, 1)),
    ("GET", "0-9", 5, 10, (5, 5)),
    ("GET", "8-9", 0, 5, (8, 0)),
    ("POST", "2-5", 1, 2, (1, 2)),
    ("GET", "nonsense", 1, 2, (1, 2)),
])
def test_the_window_is_where_range_and_limit_offset_agree(method, header, offset, limit,
                                                          expected):
    window = ranges.window(method, header, offset, limit)
    assert (window.offset, window.limit) == expected


def test_content_range_and_status_follow_postgrest():
    assert (ranges.content_range(0, 3, None), ranges.status(0, 3, None)) == ("0-2/*", 200)
    assert (ranges.content_range(2, 2, 9), ranges.status(2, 2, 9)) == ("2-3/9", 206)
    assert (ranges.content_range(0, 0, 0), ranges.status(0, 0, 0)) == ("*/0", 200)
    assert ranges.content_range(9, 0, 9) == "*/9"
    with pytest.raises(ranges.RangeNotSatisfiable) as past:
        ranges.status(10, 0, 9)
    assert (past.value.code, past.value.status, past.value.total) == ("PGRST103", 416, 9)
    with pytest.raises(ranges.RangeNotSatisfiable):
        ranges.window("GET", "5-2", 0, None)
    assert ranges.count_preference("return=representation,count=exact") == "exact"
    assert ranges.count_preference("count=estimated") == "exact"
    assert ranges.count_preference("count=planned") == "planned"
    assert ranges.count_preference("wait=5") is None


def test_a_calls_arguments_are_never_part_of_its_statement():
    # PostgreSQL logs the text of a statement that fails: a refused
    # set_secret or login must not put the value into the server's log.
    args = {"p_name": "TOKEN", "p_value": "s3cr3t-value", "p_limit": 5,
            "p_secrets": ["A", "B"], "p_upload": {"path": "s3cr3t-path"}}
    types = {"p_name": "text", "p_value": "text", "p_limit": "integer", "p_secrets": "text[]",
             "p_upload": "jsonb"}
    call = function_source("shell_api", "set_secret", {**args, "p_data": b"\x00raw"},
                           {**types, "p_data": "bytea"})
    text = repr(call.source)
    assert "s3cr3t" not in text and json.loads(call.arguments) == args
    assert call.params == [b"\x00raw"]  # raw bytes (an upload's) stay parameters of the call
    for name in args:
        assert name in text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "\udc80 lone"])
def test_an_argument_postgresql_could_not_read_as_json_is_refused_first(value):
    with pytest.raises(ApiError) as refused:
        function_source("shell_api", "set_secret", {"p_value": value}, {"p_value": "text"})
    assert (refused.value.code, refused.value.status) == ("22P02", 400)
