"""Supabase's postgrest-js (pinned in tests/gateway/postgrest_js/), run by
node, against the real gateway, database and executor: the scenario in
postgrest_js/scenario.mjs logs in, makes sessions, submits commands that
the executor runs, and reads them back with filters, order, paging with
counts, singular answers and CSV, meeting errors on the way. Each step's
{data, error, count, status} is judged here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fixtures_stack import Daemon, Gateway
from tests.gateway import node
from tests.gateway.api import PASSWORD


def ok(data: Any, count: int | None = None, status: int = 200) -> dict[str, Any]:
    return {"data": data, "error": None, "count": count, "status": status}


def failed(status: int, code: str, message: str, details: str | None = None,
           hint: str | None = None) -> dict[str, Any]:
    return {"data": None, "count": None, "status": status,
            "error": {"code": code, "message": message, "details": details, "hint": hint}}


def names(*values: str) -> list[dict[str, str]]:
    return [{"name": v} for v in values]


def test_a_postgrest_js_app_works_unchanged(postgrest_js: Path, gateway: Gateway,
                                            daemon: Daemon, alice: str) -> None:
    results = json.loads(node.run("scenario.mjs", gateway.url, "alice", PASSWORD))
    login = results.pop("login")
    assert set(login["data"]) == {"token"} and login["error"] is None
    assert results.pop("wrong_password")["error"]["code"] == "28P01"
    assert results.pop("anonymous_listing")["error"]["code"] == "42501"
    expected = {
        "renamed": ok([{"label": "docs"}, {"label": "deploy"}]),
        "in_list": ok(names("build", "test")),
        "or_tree": ok(names("deploy", "triage")),
        "negated": ok(names("build", "deploy", "docs")),
        "is_null_gte": ok(names("test", "triage")),
        "page": ok(names("docs", "test"), count=5, status=206),
        "last_page": ok(names("triage"), count=5, status=206),
        "head_count": ok(None, count=5),
        "single": ok({"name": "docs"}),
        "single_of_many": failed(406, "PGRST116",
                                 "JSON object requested, multiple (or no) rows returned",
                                 "The result contains 2 rows"),
        "maybe_single_none": ok(None, status=200),
        "csv": ok("name\nbuild\ndeploy"),
        "bad_column": failed(400, "42703", "column list_sessions.secret does not exist"),
        "offset_past_end": failed(416, "PGRST103", "Requested range not satisfiable",
                                  "An offset of 10 was requested, but there are only 5 rows."),
        "unknown_session": failed(400, "22023", "session not found",
                                  hint="Use an id returned by create_session or list_sessions."),
        "failed_commands": ok([{"command": "false", "exit_code": 1}]),
        "echo_outputs": ok([{"output": "two\n"}, {"output": "one\n"}]),
        "latest_command": ok({"command": "echo two", "status": "done"}),
    }
    bad_operator = results.pop("bad_operator")
    assert (bad_operator["status"], bad_operator["error"]["code"]) == (400, "PGRST100")
    assert results == expected
