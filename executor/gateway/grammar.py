"""PostgREST's URL grammar for a function's rows: `select=`, filters, `not.`,
`or=(…)`/`and=(…)`, `order=`, `limit=` and `offset=`, parsed into a
row_query shape.

Every column named in the request is checked against the function's result
columns from the catalog before anything reaches SQL: a name that is not one
of them is refused with 42703, text the grammar cannot read with PGRST100,
both 400, as PostgREST answers. What PostgREST offers beyond this (casts,
JSON paths, embedding, full-text search, array operators, `any`/`all`
modifiers) is refused the same way rather than half-understood.

Two bounds PostgREST does not have keep absurd input a 400 rather than a
500: logic trees nest at most MAX_LOGIC_DEPTH levels (the parser and the
query builder recurse once per level, and so would PostgreSQL's planner),
and `limit`/`offset` fit a bigint (what SQL's LIMIT and OFFSET take;
Python refuses to read more than 4,300 digits at all).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from executor.db.row_query import COMPARISONS, IS_VALUES, Filter, Logic, OrderTerm
from executor.errors import ApiError

RESERVED = frozenset({"select", "order", "limit", "offset", "or", "and", "not.or", "not.and",
                      "columns"})
OPERATORS = frozenset({*COMPARISONS, "in", "is"})
# What makes a GET parameter a filter rather than an argument: `op.` or `not.op.`.
_LOOKS_LIKE_FILTER = re.compile(r"(not\.)?[a-z]+(\([a-z]+\))?\.")
_ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
MAX_LOGIC_DEPTH = 64
BIGINT_MAX = 2**63 - 1
# How much of a malformed value an error message repeats.
_SHOWN = 60


def parse_error(what: str, details: str) -> ApiError:
    return ApiError(f'"failed to parse {what}"', "PGRST100", 400, details)


def shown(value: str) -> str:
    """``value`` as an error message repeats it: a long one cut short."""
    return value if len(value) <= _SHOWN else value[:_SHOWN] + "…"


def bigint(text: str) -> int | None:
    """The number ``text`` (ASCII digits) stands for, or None past a bigint;
    read without converting more digits than a bigint has."""
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(BIGINT_MAX)) or int(digits) > BIGINT_MAX:
        return None
    return int(digits)


@dataclass(frozen=True)
class Selection:
    """The output: (key in the answer, catalog column) in order."""
    fields: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Grammar:
    select: Selection
    where: tuple[Filter | Logic, ...]
    order: tuple[OrderTerm, ...]
    offset: int
    limit: int | None


def is_grammar(key: str, value: str) -> bool:
    """Whether a GET parameter that is not an argument name belongs to the grammar."""
    return key in RESERVED or bool(_LOOKS_LIKE_FILTER.match(value))


class Parser:
    def __init__(self, function: str, columns: Sequence[str]) -> None:
        self.function = function
        self.columns = tuple(columns)

    def column(self, name: str) -> str:
        if name not in self.columns:
            raise ApiError(f"column {self.function}.{name} does not exist", "42703", 400)
        return name

    def parse(self, params: Iterable[tuple[str, str]]) -> Grammar:
        select = Selection(tuple((c, c) for c in self.columns))
        where: list[Filter | Logic] = []
        order: tuple[OrderTerm, ...] = ()
        offset, limit = 0, None
        for key, value in params:
            if key == "select":
                select = self.selection(value)
            elif key == "order":
                order = self.ordering(value)
            elif key == "limit":
                limit = self.count_of("limit", value)
            elif key == "offset":
                offset = self.count_of("offset", value)
            elif key in ("or", "and", "not.or", "not.and"):
                negated = key.startswith("not.")
                where.append(self.logic(key.removeprefix("not."), value, negated))
            elif key == "columns":
                continue  # names the body's keys for bulk inserts; a call has none
            else:
                where.append(self.filter(self.column(key), value))
        return Grammar(select, tuple(where), order, offset, limit)

    @staticmethod
    def count_of(name: str, value: str) -> int:
        if not value.isascii() or not value.isdigit():
            raise parse_error(f"{name} parameter ({shown(value)})",
                              f"{name} must be a non-negative integer")
        count = bigint(value)
        if count is None:
            raise parse_error(f"{name} parameter ({shown(value)})",
                              f"{name} must be at most {BIGINT_MAX}")
        return count

    def selection(self, text: str) -> Selection:
        fields: list[tuple[str, str]] = []
        for item in (i.strip() for i in text.split(",")) if text.strip() else ["*"]:
            if item == "*":
                fields.extend((c, c) for c in self.columns)
                continue
            alias, _, name = item.rpartition(":")
            if "(" in item or "->" in item or item.endswith(":") or alias.endswith(":"):
                raise parse_error(f"select ({text})",
                                  "only columns and renames (alias:column) are supported")
            if alias and not _ALIAS.fullmatch(alias):
                raise parse_error(f"select ({text})", f"not an alias: {alias}")
            fields.append((alias or name, self.column(name)))
        return Selection(tuple(fields))

    def ordering(self, text: str) -> tuple[OrderTerm, ...]:
        terms = []
        for item in text.split(","):
            name, *modifiers = item.strip().split(".")
            descending = False
            nulls: Literal["first", "last"] | None = None
            for modifier in modifiers:
                if modifier in ("asc", "desc"):
                    descending = modifier == "desc"
                elif modifier in ("nullsfirst", "nullslast"):
                    nulls = "first" if modifier == "nullsfirst" else "last"
                else:
                    raise parse_error(f"order ({text})",
                                      f"unexpected {modifier!r}: expecting asc, desc, "
                                      "nullsfirst or nullslast")
            terms.append(OrderTerm(self.column(name), descending, nulls))
        return tuple(terms)

    def filter(self, column: str, text: str) -> Filter:
        negated = text.startswith("not.")
        body = text.removeprefix("not.")
        operator, dot, value = body.partition(".")
        if not dot or operator not in OPERATORS:
            raise parse_error(f"filter ({text})",
                              f"unknown operator {operator!r}: expecting one of "
                              + ", ".join(sorted(OPERATORS)))
        if operator == "in":
            return Filter(column, operator, in_list(text, value), negated)
        if operator == "is" and value not in IS_VALUES:
            raise parse_error(f"filter ({text})",
                              "is. expects " + ", ".join(sorted(IS_VALUES)))
        return Filter(column, operator, value, negated)

    def logic(self, operator: str, text: str, negated: bool, depth: int = 1) -> Logic:
        if not (text.startswith("(") and text.endswith(")")):
            raise parse_error(f"logic tree ({shown(text)})", "expecting a parenthesized list")
        if depth > MAX_LOGIC_DEPTH:
            raise parse_error(f"logic tree ({shown(text)})",
                              f"logic trees may nest at most {MAX_LOGIC_DEPTH} levels deep")
        terms: list[Filter | Logic] = []
        for item in split_top_level(text[1:-1], text):
            nested = re.fullmatch(r"(not\.)?(and|or)(\(.*\))", item, re.DOTALL)
            if nested:
                terms.append(self.logic(nested.group(2), nested.group(3), bool(nested.group(1)),
                                        depth + 1))
                continue
            name, dot, rest = item.partition(".")
            if not dot:
                raise parse_error(f"logic tree ({text})",
                                  f"expecting column.operator.value: {item}")
            found = self.filter(self.column(name), rest)
            terms.append(Filter(found.column, found.operator, unquote(found.value), found.negated)
                         if isinstance(found.value, str) else found)
        return Logic("or" if operator == "or" else "and", tuple(terms), negated)


def split_top_level(text: str, whole: str) -> list[str]:
    """Comma-separated items, keeping commas inside parentheses and double quotes."""
    items, current, depth, quoted, escaped = [], "", 0, False, False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif not quoted and char in "()":
            depth += 1 if char == "(" else -1
            if depth < 0:
                raise parse_error(f"logic tree ({shown(whole)})", "unbalanced parentheses")
        elif not quoted and depth == 0 and char == ",":
            items.append(current)
            current = ""
            continue
        current += char
    if quoted or depth:
        raise parse_error(f"logic tree ({shown(whole)})", "unbalanced quotes or parentheses")
    return [*items, current]


def unquote(value: str) -> str:
    """A double-quoted value loses its quotes and backslash escapes; others stay as they are."""
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def in_list(text: str, value: str) -> list[str]:
    if not (value.startswith("(") and value.endswith(")")):
        raise parse_error(f"filter ({text})", "in. expects a parenthesized list: in.(a,b)")
    inner = value[1:-1]
    return [unquote(item) for item in split_top_level(inner, text)] if inner else []
