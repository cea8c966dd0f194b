"""The OpenAPI (Swagger 2.0) description of shell_api that PostgREST serves
at `/`, here for `Accept: application/openapi+json` only: a browser's `/`
stays the web UI. Built from the same catalog the gateway calls through, so
it cannot describe a function the gateway does not serve."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from executor.db.gateway import API_SCHEMA, RpcFunction

MEDIA_TYPE = "application/openapi+json"
# PostgreSQL types as JSON Schema types; `format` carries the PostgreSQL name, as PostgREST does.
_JSON_TYPES = {"integer": "integer", "bigint": "integer", "smallint": "integer",
               "numeric": "number", "real": "number", "double precision": "number",
               "boolean": "boolean", "json": "object", "jsonb": "object"}
_GRAMMAR_PARAMETERS: list[dict[str, Any]] = [
    {"name": "select", "in": "query", "type": "string", "description": "columns (alias:column)"},
    {"name": "order", "in": "query", "type": "string",
     "description": "column.asc|desc.nullsfirst|nullslast, …"},
    {"name": "limit", "in": "query", "type": "integer"},
    {"name": "offset", "in": "query", "type": "integer"},
    {"name": "Range", "in": "header", "type": "string", "description": "first-last (GET only)"},
    {"name": "Prefer", "in": "header", "type": "string",
     "enum": ["count=exact", "count=planned", "count=estimated"]},
]


def _schema(pg_type: str) -> dict[str, Any]:
    json_type = _JSON_TYPES.get(pg_type, "string")
    return {"type": json_type, "format": pg_type}


def _operation(fn: RpcFunction, columns: tuple[str, ...] | None, get: bool) -> dict[str, Any]:
    arguments = dict(zip(fn.arg_names, fn.arg_types))
    if get:
        parameters = [{"name": name, "in": "query", "required": name in fn.required,
                       **_schema(pg_type)} for name, pg_type in arguments.items()]
    else:
        body = {"type": "object", "properties": {n: _schema(t) for n, t in arguments.items()}}
        if fn.required:
            body["required"] = list(fn.required)
        parameters = [{"name": "args", "in": "body", "required": bool(fn.required),
                       "schema": body}]
    if columns is not None:
        parameters += _GRAMMAR_PARAMETERS
    returns: dict[str, Any] = {"description": "OK"}
    if columns is not None:
        returns["schema"] = {"type": "array", "items": {
            "type": "object", "properties": {c: {} for c in columns}}}
    return {"tags": ["(rpc) " + fn.name], "produces": _produces(fn, columns),
            "parameters": parameters, "responses": {"200": returns, "206": returns}
            if columns is not None else {"200": returns}}


def _produces(fn: RpcFunction, columns: tuple[str, ...] | None) -> list[str]:
    produced = ["application/json"]
    if fn.returns_html:
        produced.append("text/html")
    if fn.returns_bytes:
        produced.append("application/octet-stream")
    if columns is not None:
        produced += ["application/vnd.pgrst.object+json", "text/csv"]
    return produced


def describe(catalog: Mapping[str, RpcFunction],
             columns: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    paths: dict[str, Any] = {"/": {"get": {"tags": ["Introspection"],
                                           "produces": [MEDIA_TYPE],
                                           "responses": {"200": {"description": "OK"}}}}}
    for name in sorted(catalog):
        fn = catalog[name]
        operations = {"post": _operation(fn, columns.get(name), get=False)}
        if fn.read_only:
            operations["get"] = _operation(fn, columns.get(name), get=True)
        paths[f"/rpc/{name}"] = operations
    return {
        "swagger": "2.0",
        "info": {"title": "pg_shell", "version": "1",
                 "description": f"The {API_SCHEMA} schema over PostgREST's protocol"},
        "basePath": "/", "schemes": ["http", "https"],
        "consumes": ["application/json", "application/x-www-form-urlencoded"],
        "produces": ["application/json", "application/vnd.pgrst.object+json", "text/csv"],
        "securityDefinitions": {"JWT": {"type": "apiKey", "in": "header",
                                        "name": "Authorization"}},
        "security": [{"JWT": []}],
        "paths": paths,
    }


class RootWithDescription:
    """`/` as the web UI (``static``), or the description when a client asks for it."""

    def __init__(self, static: ASGIApp, description: Callable[[], dict[str, Any]]) -> None:
        self.static = static
        self.description = description  # called per request: the catalog is read at start-up

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/":
            request = Request(scope)
            if MEDIA_TYPE in request.headers.get("accept", ""):
                response = Response(json.dumps(self.description()),
                                    media_type=f"{MEDIA_TYPE}; charset=utf-8")
                await response(scope, receive, send)
                return
        await self.static(scope, receive, send)
