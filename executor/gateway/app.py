"""The HTTP front: `/rpc/<function>` with PostgREST's semantics, the static
UI with a strict Content-Security-Policy, and long-polling for live output."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import decimal
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from executor import metrics
from executor.db.gateway import API_SCHEMA, GatewayDatabase, RpcFunction
from executor.errors import ApiError, DatabaseError
from executor.gateway import media, openapi, ranges, rows
from executor.gateway.auth import AuthError, Identity, identify
from executor.gateway.grammar import is_grammar
from executor.gateway.live import ChangeFeed
from executor.gateway.metrics_route import metrics_endpoint, read_queue_depth
from executor.gateway.status import http_status

log = logging.getLogger(__name__)
T = TypeVar("T")

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
        "object-src 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
# Functions whose answer may be held back until something changes.
LONG_POLL = {"session_changes", "session_changes_html"}
MAX_WAIT_S = 25
# HEAD is a GET whose body is left out (a client asking for the count only).
READS = ("GET", "HEAD")
_PREFER_WAIT = re.compile(r"\bwait=(\d+)")


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, (bytes, memoryview)):
        return "\\x" + bytes(value).hex()  # bytea as to_json writes it (PostgreSQL's hex format)
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    raise TypeError(f"cannot serialize {type(value).__name__}")


def _canonical_uuid(value: Any) -> str:
    """The form NOTIFY payloads use (lowercase, hyphenated), or "" if none."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        return ""


def json_response(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, default=_json_default), status, media_type="application/json")


def error_response(status: int, code: str, message: str, details: str | None = None,
                   hint: str | None = None) -> Response:
    return json_response({"code": code, "message": message, "details": details, "hint": hint},
                         status)


def api_error_response(exc: ApiError) -> Response:
    response = error_response(exc.status or 400, exc.code or "PGRST000", str(exc), exc.details,
                              exc.hint)
    if isinstance(exc, ranges.RangeNotSatisfiable):
        response.headers["Content-Range"] = f"*/{'*' if exc.total is None else exc.total}"
    return response


class Gateway:
    def __init__(self, db: GatewayDatabase, feed: ChangeFeed) -> None:
        self.db = db
        self.feed = feed
        self.catalog: dict[str, RpcFunction] = {}
        self.columns: dict[str, tuple[str, ...]] = {}  # set-returning functions' result columns
        self.secret = ""

    def load(self) -> None:
        self.catalog = self.db.catalog()
        self.columns = self.db.result_columns()
        self.secret = self.db.jwt_secret()

    async def rpc(self, request: Request) -> Response:
        response = await self._rpc(request)
        name = request.path_params["name"]
        # Only known names as labels: a caller cannot grow the metric without bound.
        metrics.gateway_request(name if name in self.catalog else "unknown", response.status_code)
        return response

    async def _rpc(self, request: Request) -> Response:
        try:
            identity = identify(request.headers.get("authorization"), self.secret)
        except AuthError as exc:
            return error_response(401, "PGRST301", str(exc))
        name = request.path_params["name"]
        fn = self.catalog.get(name)
        try:
            args, grammar = await self._arguments(request, self.columns.get(name))
        except ValueError as exc:
            return error_response(400, "PGRST102", str(exc))
        if fn is None or not set(fn.required) <= set(args) or not set(args) <= set(fn.arg_names):
            listed = ", ".join(sorted(args))
            return error_response(404, "PGRST202",
                                  "Could not find the function "
                                  f"{API_SCHEMA}.{name}({listed}) in the schema cache",
                                  hint="Check the function name and its parameter names.")
        if request.method in READS and not fn.read_only:
            return error_response(405, "PGRST101", f"{name} changes data: call it with POST")
        try:
            if name in self.columns:
                return await self._rows(request, fn, args, grammar, identity)
            result = await self._wait(fn, args, request.headers.get("prefer", ""),
                                      lambda: self.db.call(fn, args, identity.role,
                                                           identity.claims))
        except ApiError as exc:
            return api_error_response(exc)
        except DatabaseError as exc:
            status = http_status(exc.sqlstate, identity.authenticated)
            return error_response(status, exc.sqlstate or "PGRST000", str(exc), exc.detail,
                                  exc.hint)
        offered = ({media.HTML} if fn.returns_html
                   else {media.OCTET_STREAM} if fn.returns_bytes else set())
        chosen = media.preferred(request.headers.get("accept"), offered)
        if chosen == media.HTML:
            return HTMLResponse(result or "")
        if chosen == media.OCTET_STREAM:
            return Response(result or b"", media_type=media.OCTET_STREAM)
        return json_response(result)

    async def _rows(self, request: Request, fn: RpcFunction, args: dict[str, Any],
                    grammar: list[tuple[str, str]], identity: Identity) -> Response:
        """A set-returning function: PostgREST's grammar applied to its rows."""
        row_plan = rows.plan(fn, self.columns[fn.name], args, grammar,
                             "GET" if request.method in READS else request.method,
                             request.headers)
        page = await self._wait(fn, args, request.headers.get("prefer", ""),
                                lambda: self.db.read_rows(row_plan.query, identity.role,
                                                          identity.claims, row_plan.check))
        return rows.respond(row_plan, page, lambda v: json.dumps(v, default=_json_default))

    async def _arguments(self, request: Request, columns: tuple[str, ...] | None
                         ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """The named arguments, and the query grammar for a function with result columns:
        on POST the whole query string, on GET the parameters that name no argument
        and read as grammar (`select`, `col=op.value`, …), as PostgREST splits them."""
        query = request.query_params.multi_items()
        if request.method in READS:
            fn = self.catalog.get(request.path_params["name"])
            names = set(fn.arg_names) if fn else set()
            grammar = [(k, v) for k, v in query
                       if columns is not None and k not in names and is_grammar(k, v)]
            return dict(kv for kv in query if kv not in grammar), grammar
        return await self._body_arguments(request), query if columns is not None else []

    async def _body_arguments(self, request: Request) -> dict[str, Any]:
        body = await request.body()
        content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
        if content_type == "application/x-www-form-urlencoded":
            return dict(parse_qsl(body.decode(), keep_blank_values=True))
        if not body.strip():
            return {}
        try:
            args = json.loads(body)
        except ValueError as exc:
            raise ValueError(f"the body is not valid JSON: {exc}") from exc
        if not isinstance(args, dict):
            raise ValueError("the body must be a JSON object of named arguments")
        return args

    async def _wait(self, fn: RpcFunction, args: dict[str, Any], prefer: str,
                    fetch: Callable[[], T]) -> T:
        """``fetch()``'s answer; for a long-polled function with `Prefer: wait=N`,
        the first non-empty one within N seconds."""
        wait = _PREFER_WAIT.search(prefer)
        session_id = _canonical_uuid(args.get("p_session_id"))
        if fn.name not in LONG_POLL or not wait or not session_id:
            return await run_in_threadpool(fetch)
        # Subscribe before reading, so a change between the read and the
        # wait still wakes us.
        deadline = time.monotonic() + min(int(wait.group(1)), MAX_WAIT_S)
        changed = self.feed.subscribe(session_id)
        try:
            while True:
                changed.clear()
                result = await run_in_threadpool(fetch)
                remaining = deadline - time.monotonic()
                if result or remaining <= 0:
                    return result
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
        finally:
            self.feed.unsubscribe(session_id, changed)


def create_app(dsn: str, html_dir: Path, metrics_interval_s: float = 5.0) -> Starlette:
    gateway = Gateway(GatewayDatabase(dsn), ChangeFeed(dsn))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(gateway.load)
        gateway.feed.start()
        queue_depth = asyncio.create_task(read_queue_depth(gateway.db, metrics_interval_s))
        yield
        queue_depth.cancel()
        gateway.feed.stop()
        gateway.db.close()

    async def security_headers(request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    return Starlette(
        routes=[
            Route("/rpc/{name:str}", gateway.rpc, methods=["GET", "POST"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Mount("/", openapi.RootWithDescription(
                StaticFiles(directory=html_dir, html=True),
                lambda: openapi.describe(gateway.catalog, gateway.columns))),
        ],
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=security_headers)],
        lifespan=lifespan,
    )
