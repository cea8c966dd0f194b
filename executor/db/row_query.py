"""PostgREST's query grammar over a set-returning function's rows, as SQL.

The shape of a query (which columns, which conditions, which order, which
page) arrives already parsed and checked by the gateway. Here it becomes one
statement, `SELECT … FROM shell_api.fn(args) AS r WHERE … ORDER BY … LIMIT …
OFFSET …`, composed with psycopg2.sql: identifiers are the function's result
columns as the catalog names them (never request text), values are bound
parameters, and the output columns get positional names (c0, c1, …) so that
request-chosen aliases never reach SQL at all.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from psycopg2 import sql

from executor.errors import ApiError

# The comparison operators, each as fixed SQL text chosen by name.
COMPARISONS = {"eq": "=", "neq": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<=",
               "like": "LIKE", "ilike": "ILIKE"}
# `is.<value>`: the values PostgREST accepts, each as fixed SQL text.
IS_VALUES = {"null": "NULL", "not_null": "NOT NULL", "true": "TRUE", "false": "FALSE",
             "unknown": "UNKNOWN"}

RESULT_COLUMNS = """
SELECT p.proname AS function, a.name AS column
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
CROSS JOIN LATERAL unnest(p.proargnames, p.proargmodes) WITH ORDINALITY AS a(name, mode, ord)
WHERE n.nspname = %(schema)s AND p.proretset AND a.mode IN ('o', 'b', 't')
UNION ALL
-- SETOF a composite type: its attributes are the columns.
SELECT p.proname, att.attname
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_type t ON t.oid = p.prorettype AND t.typrelid <> 0
JOIN pg_attribute att ON att.attrelid = t.typrelid AND att.attnum > 0 AND NOT att.attisdropped
WHERE n.nspname = %(schema)s AND p.proretset AND p.proargmodes IS NULL
ORDER BY 1
"""


@dataclass(frozen=True)
class Filter:
    """``column op value``; ``value`` is a list for ``in``, a key of IS_VALUES for ``is``."""
    column: str
    operator: str
    value: str | list[str]
    negated: bool = False


@dataclass(frozen=True)
class Logic:
    """``and(…)`` / ``or(…)`` over filters and nested logic."""
    operator: Literal["and", "or"]
    terms: Sequence[Filter | Logic]
    negated: bool = False


@dataclass(frozen=True)
class OrderTerm:
    column: str
    descending: bool = False
    nulls: Literal["first", "last"] | None = None


@dataclass(frozen=True)
class RowQuery:
    """What to read from the rows of ``call`` (function_source):
    ``columns`` in output order (catalog names)."""
    call: FunctionCall
    columns: Sequence[str]
    where: Sequence[Filter | Logic] = ()
    order: Sequence[OrderTerm] = ()
    offset: int = 0
    limit: int | None = None
    csv: bool = False  # each row as PostgreSQL's record text, as PostgREST's CSV is built
    count: Literal["exact", "planned"] | None = None


def _column(name: str) -> sql.Composable:
    return sql.SQL("r.{}").format(sql.Identifier(name))


def _filter(term: Filter, params: list[Any]) -> sql.Composable:
    column = _column(term.column)
    if term.operator == "is":
        assert isinstance(term.value, str)
        condition: sql.Composable = sql.SQL("{} IS " + IS_VALUES[term.value]).format(column)
    elif term.operator == "in":
        assert isinstance(term.value, list)
        if not term.value:
            condition = sql.SQL("false")
        else:
            params.extend(term.value)
            condition = sql.SQL("{} IN ({})").format(
                column, sql.SQL(", ").join(sql.Placeholder() * len(term.value)))
    else:
        value = term.value
        if term.operator in ("like", "ilike"):
            value = str(value).replace("*", "%")  # PostgREST's URL-friendly wildcard
        params.append(value)
        condition = sql.SQL("{} " + COMPARISONS[term.operator] + " %s").format(column)
    return sql.SQL("NOT ({})").format(condition) if term.negated else condition


def condition(terms: Sequence[Filter | Logic], params: list[Any],
              joiner: str = "AND") -> sql.Composable:
    """The terms joined by ``joiner``; their values appended to ``params`` in order."""
    parts: list[sql.Composable] = []
    for term in terms:
        if isinstance(term, Filter):
            parts.append(_filter(term, params))
            continue
        inner = condition(term.terms, params, term.operator.upper())
        parts.append(sql.SQL("NOT ({})" if term.negated else "({})").format(inner))
    if not parts:
        return sql.SQL("true")
    return sql.SQL(f" {joiner} ").join(parts)


def _order(terms: Sequence[OrderTerm]) -> sql.Composable:
    if not terms:
        return sql.SQL("")
    items = [sql.SQL("{} {}{}").format(
        _column(t.column), sql.SQL("DESC" if t.descending else "ASC"),
        sql.SQL(f" NULLS {t.nulls.upper()}" if t.nulls else "")) for t in terms]
    return sql.SQL(" ORDER BY {}").format(sql.SQL(", ").join(items))


def _output(query: RowQuery) -> sql.Composable:
    columns = [_column(c) for c in query.columns]
    if query.csv:
        record = sql.SQL("ROW({})::text").format(sql.SQL(", ").join(columns))
        return sql.SQL("substr({0}, 2, length({0}) - 2) AS line").format(record)
    return sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(col, sql.Identifier(f"c{i}")) for i, col in enumerate(columns))


def page_statement(query: RowQuery) -> tuple[sql.Composable, list[Any]]:
    """The page, with the whole result's size beside each row when an exact count is asked."""
    params: list[Any] = [*query.call.params]
    where = condition(query.where, params)
    total = sql.SQL(", count(*) OVER () AS total" if query.count == "exact" else "")
    statement = sql.SQL("SELECT {}{} FROM {} AS r WHERE {}{} LIMIT %s OFFSET %s").format(
        _output(query), total, query.call.source, where, _order(query.order))
    return statement, [*params, query.limit, query.offset]


def count_statement(query: RowQuery) -> tuple[sql.Composable, list[Any]]:
    """The size of the whole (filtered) result, exactly or as the planner estimates it."""
    params: list[Any] = [*query.call.params]
    where = condition(query.where, params)
    if query.count == "planned":
        return sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM {} AS r WHERE {}").format(
            query.call.source, where), params
    return sql.SQL("SELECT count(*) AS total FROM {} AS r WHERE {}").format(
        query.call.source, where), params


@dataclass(frozen=True)
class RowPage:
    """One page of rows (each as the caller's ``encode`` made it, by default
    dicts keyed c0, c1, … or CSV lines), the whole result's size, and whether
    the page stopped short of the rows asked for to stay within a byte budget."""
    rows: list[Any]
    total: int | None
    cut: bool = False
    # The whole result's size when reading stopped at ``max_rows`` (counted by
    # the database, not read): what a refusal of "more than one row" reports.
    counted: int | None = None

    def __len__(self) -> int:
        return len(self.rows)


FETCH_BATCH = 32


def read_page(cur: Any, query: RowQuery, encode: Callable[[Any], bytes] | None = None,
              budget: int | None = None, max_rows: int | None = None) -> RowPage:
    """The page; with ``encode`` and ``budget``, each row is encoded as it
    arrives (a server-side cursor, a few rows at a time) and the page ends
    before the row that would take it past ``budget`` bytes (never before
    its first row). With ``max_rows``, reading stops at that many rows and
    the database counts the rest (RowPage.counted): a singular object needs
    to know only whether there is more than one."""
    statement, params = page_statement(query)
    rows: list[Any] = []
    size = 0
    cut = False
    counted: int | None = None
    total: int | None = None
    with cur.connection.cursor(name="page", cursor_factory=type(cur)) as page:
        page.itersize = FETCH_BATCH if max_rows is None else max_rows
        page.execute(statement, params)
        for r in page:
            if query.count == "exact" and total is None:
                total = int(r["total"])
            row = r["line"] if query.csv else {f"c{i}": r[f"c{i}"]
                                               for i in range(len(query.columns))}
            if encode is not None:
                row = encode(row)
                if budget is not None and rows and size + len(row) > budget:
                    cut = True
                    break
                size += len(row)
            rows.append(row)
            if max_rows is not None and len(rows) >= max_rows:
                counted = -1  # known below
                break
    if counted is not None:
        statement, params = count_statement(dataclasses.replace(query, count="exact"))
        cur.execute(statement, params)
        counted = max(0, int(cur.fetchone()["total"]) - query.offset)  # the page's rows,
        counted = counted if query.limit is None else min(counted, query.limit)  # as if read
    if query.count == "planned" or (query.count == "exact" and total is None):
        # No row carries the size (an empty page), or only an estimate is wanted.
        statement, params = count_statement(query)
        cur.execute(statement, params)
        answer = cur.fetchone()
        total = (int(answer["total"]) if query.count == "exact"
                 else int(answer["QUERY PLAN"][0]["Plan"]["Plan Rows"]))
    return RowPage(rows, total, cut, counted)


# The arguments of a call, as the request gave them: a transaction-local
# setting the call reads (db/gateway.py sets it), so that no argument's value
# is part of the statement's text. PostgreSQL logs the text of a statement
# that fails: a refused set_secret or login must not put a secret or a
# password into the server's log. Raw bytes (an upload's body, a file's
# content) are the one exception: JSON cannot carry them, so they stay
# parameters of the call itself. The setting's own statement (it does not
# fail on the arguments) holds them as text: statement logging (log_statement,
# log_min_duration_statement) must stay off, as it is by default.
ARGUMENTS_SETTING = "pg_shell.arguments"
_ARGUMENT = sql.SQL("(current_setting('" + ARGUMENTS_SETTING + "')::jsonb {} {})")


@dataclass(frozen=True)
class FunctionCall:
    source: sql.Composable  # ``schema.function(name => argument::type, …)``
    params: list[Any]  # the raw bytes arguments, bound in order
    arguments: str  # the other arguments, JSON for ARGUMENTS_SETTING


def function_source(schema: str, function: str, args: dict[str, Any],
                    types: dict[str, str]) -> FunctionCall:
    """The call with named arguments: names checked against the catalog by
    the caller, types as the catalog spells them."""
    params: list[Any] = []
    given: dict[str, Any] = {}

    def argument(name: str, value: Any) -> sql.Composable:
        cast = sql.SQL("::" + types[name])
        if isinstance(value, (bytes, bytearray, memoryview)):
            params.append(value)
            return sql.SQL("%s") + cast
        given[name] = value
        key = sql.Literal(name)
        if isinstance(value, list) and types[name].endswith("[]"):
            # A JSON array for an SQL array, as PostgREST takes it.
            elements = _ARGUMENT.format(sql.SQL("->"), key)
            return sql.SQL("ARRAY(SELECT jsonb_array_elements_text({})){}").format(elements, cast)
        # An object or array is JSON; anything else its text, cast.
        operator = "->" if isinstance(value, (dict, list)) else "->>"
        return sql.SQL("{}{}").format(_ARGUMENT.format(sql.SQL(operator), key), cast)

    named = [sql.SQL("{} => {}").format(sql.Identifier(name), argument(name, value))
             for name, value in args.items()]
    call = sql.SQL("{}.{}({})").format(sql.Identifier(schema), sql.Identifier(function),
                                       sql.SQL(", ").join(named))
    return FunctionCall(call, params, _arguments_json(given))


def _arguments_json(given: dict[str, Any]) -> str:
    """The arguments as JSON PostgreSQL takes: a NaN or a lone surrogate would
    fail the call's jsonb cast, whose error context quotes the JSON, values
    and all, into the server's log."""
    try:
        text = json.dumps(given, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:
        raise ApiError("an argument is not valid JSON text: NaN, Infinity or a lone surrogate",
                       "22P02", 400) from exc
    return text
