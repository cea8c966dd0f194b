"""The HTTP front: `/rpc/<function>` with PostgREST's semantics, the static
UI with a strict Content-Security-Policy, and long-polling for live output."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import json
import logging
import re
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from executor import metrics
from executor.config import Settings
from executor.db import admin as db_admin
from executor.db import row_query
from executor.db.gateway import API_SCHEMA, GatewayDatabase, ResponseSettings, RpcFunction
from executor.db.queue import queue_depth
from executor.errors import ApiError, DatabaseError
from executor.gateway import media, memory, openapi, ranges, rows
from executor.gateway.auth import AuthError, Identity, identify
from executor.gateway.body_limit import BodyLimit
from executor.gateway.files import Files, PartsResponse, StagedUpload, user_of
from executor.gateway.grammar import bigint, is_grammar
from executor.gateway.json_stream import ByteaError, NulInText
from executor.gateway.live import ChangeFeed, LongPolls, TooManyWaiters
from executor.gateway.security_headers import SecurityHeaders
from executor.gateway.status import hinted_retry_after, http_status
from executor.gateway.throttle import AddressThrottle, retry_after, try_again_in
from executor.gateway.user_limits import UserLimits

log = logging.getLogger(__name__)
T = TypeVar("T")

# Functions whose answer may be held back until something changes.
LONG_POLL = {"session_changes", "session_changes_html"}
MAX_WAIT_S = 25
# HEAD is a GET whose body is left out (a client asking for the count only).
READS = ("GET", "HEAD")
_PREFER_WAIT = re.compile(r"\bwait=(\d+)")
# Arguments are flat values or small JSON documents; PostgREST passes deeper ones
# on, but nothing in shell_api takes them, and parsing them costs stack.
MAX_NESTING = 64
_BRACKETS = re.compile(rb"[][{}]")


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
    return Response(_dumps(body), status, media_type="application/json; charset=utf-8")


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
    def __init__(self, db: GatewayDatabase, feed: ChangeFeed, logins: AddressThrottle,
                 live: LongPolls | None = None, response_budget: int | None = None,
                 limits: UserLimits | None = None, max_argument_bytes: int = 2 * 1024 * 1024
                 ) -> None:
        self.db = db
        self.limits = limits or UserLimits(32, 4)
        self.files = Files(db, self.limits, lambda: self.catalog, max_argument_bytes)
        self.feed = feed
        self.live = live or LongPolls(feed, 192, 16)
        self.response_budget = response_budget
        self.logins = logins
        self.catalog: dict[str, RpcFunction] = {}
        self.columns: dict[str, tuple[str, ...]] = {}  # set-returning functions' result columns
        self.secret = ""

    def load(self) -> None:
        self.catalog = self.db.catalog()
        self.columns = self.db.result_columns()
        self.secret = db_admin.jwt_secret(self.db)
        self.db.load_role_settings()

    def upload_allowed(self, scope: Scope) -> bool:
        """Whether a request may send an upload's body: upload_file with a
        valid token (checked before the body is read, so an anonymous client
        gets the small limit). Only as JSON, which is read as it arrives (files.py)."""
        headers = Headers(scope=scope)
        content_type = headers.get("content-type", media.JSON).split(";")[0].strip()
        if scope["path"] != "/rpc/upload_file" or content_type != media.JSON:
            return False
        try:
            return identify(headers.get("authorization"), self.secret).authenticated
        except AuthError:
            return False

    async def rpc(self, request: Request) -> Response:
        user = self._user(request)
        if user and not self.limits.enter(user):
            response = error_response(429, "PT429", "too many requests of this user at once",
                                      hint=try_again_in(1))
            response.headers["Retry-After"] = "1"
        else:
            response = await self._counted(request, user)
        name = request.path_params["name"]
        # Only known names as labels: a caller cannot grow the metric without bound.
        metrics.gateway_request(name if name in self.catalog else "unknown", response.status_code)
        return response

    def _user(self, request: Request) -> str:
        """The signed-in user a request counts against (user_limits), or ""."""
        try:
            return user_of(identify(request.headers.get("authorization"), self.secret))
        except AuthError:
            return ""

    async def _counted(self, request: Request, user: str) -> Response:
        """The answer to a request counted in for ``user``: counted out once it
        has been sent (a streamed one at its end). A staged upload whose call
        failed is discarded."""
        def release() -> None:
            if user:
                self.limits.leave(user)
        response: Response | None = None
        try:
            response = await self._rpc(request)
        finally:
            try:
                staged = getattr(request.state, "staged", None)
                if staged is not None and (response is None or response.status_code >= 400):
                    # The identity the call was made with: its token may have
                    # expired while a long upload arrived.
                    self.files.discard(request.state.identity, {"p_content": staged})
            finally:
                if not isinstance(response, PartsResponse):
                    release()
        if isinstance(response, PartsResponse):
            response.after = release
        return response

    async def _rpc(self, request: Request) -> Response:
        try:
            identity = identify(request.headers.get("authorization"), self.secret)
        except AuthError as exc:
            return error_response(401, "PGRST301", str(exc))
        request.state.identity = identity
        name = request.path_params["name"]
        fn = self.catalog.get(name)
        try:
            args, grammar = await self._arguments(request, self.columns.get(name), identity)
        except NulInText as exc:
            return error_response(400, "22P05", str(exc), "\\u0000 cannot be converted to text.")
        except ByteaError as exc:  # as PostgreSQL refuses it
            return error_response(400, exc.sqlstate, str(exc))
        except ValueError as exc:
            return error_response(400, "PGRST102", str(exc))
        if _has_nul([args, grammar]):
            # As PostgreSQL answers PostgREST, which hands it the JSON whole.
            return error_response(400, "22P05", "unsupported Unicode escape sequence",
                                  "\\u0000 cannot be converted to text.")
        if fn is None or not set(fn.required) <= set(args) or not set(args) <= set(fn.arg_names):
            listed = ", ".join(sorted(args))
            return error_response(404, "PGRST202",
                                  "Could not find the function "
                                  f"{API_SCHEMA}.{name}({listed}) in the schema cache",
                                  hint="Check the function name and its parameter names.")
        if request.method in READS and not fn.read_only:
            return error_response(405, "PGRST101", f"{name} changes data: call it with POST")
        if name == "login" and (wait := self.logins.take(_client_address(request))):
            refused = error_response(429, "PT429", "too many logins from this address",
                                     hint=try_again_in(retry_after(wait)))
            refused.headers["Retry-After"] = retry_after(wait)
            return refused
        asked = ResponseSettings()
        try:
            if name in self.columns:
                return await self._rows(request, fn, args, grammar, identity)
            if self.files.streams_download(name):
                return await self.files.download(request, args, identity)
            async with self.files.finishing_turn(args):
                result = await self._wait(request, identity, fn, args,
                                          lambda a: lambda: self.db.call_function(
                                              *self.files.finishing(fn, a), identity.role,
                                              identity.claims, asked))
        except TooManyWaiters as exc:
            refused = error_response(429, "PT429", str(exc),
                                     hint=try_again_in(exc.retry_after))
            refused.headers["Retry-After"] = str(exc.retry_after)
            return refused
        except ApiError as exc:
            return api_error_response(exc)
        except DatabaseError as exc:
            status = http_status(exc.sqlstate, identity.authenticated)
            refused = error_response(status, exc.sqlstate or "PGRST000", str(exc), exc.detail,
                                     exc.hint)
            seconds = hinted_retry_after(exc.sqlstate, exc.hint)
            if seconds is not None:
                refused.headers["Retry-After"] = seconds
            return refused
        response = self._answer(request, fn, result)
        if asked.status is not None:  # set by the function, as PostgREST honours it
            response.status_code = asked.status
        response.headers.update(asked.headers)
        return response

    def _answer(self, request: Request, fn: RpcFunction, result: Any) -> Response:
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
        method = "GET" if request.method in READS else request.method

        def fetch_with(a: dict[str, Any]) -> Callable[[], row_query.RowPage]:
            plan = row_plan if a is args else rows.plan(fn, self.columns[fn.name], a, grammar,
                                                        method, request.headers)
            return lambda: self.db.read_rows(plan.query, identity.role, identity.claims,
                                             plan.check, rows.encoder(plan, _dumps),
                                             # one object is all or nothing
                                             None if plan.representation == rows.OBJECT
                                             else self.response_budget, plan.max_rows)
        page = await self._wait(request, identity, fn, args, fetch_with)
        return rows.respond(row_plan, page)

    async def _arguments(self, request: Request, columns: tuple[str, ...] | None,
                         identity: Identity) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """The named arguments, and the query grammar for a function with result columns:
        on POST the whole query string, on GET the parameters that name no argument
        and read as grammar (`select`, `col=op.value`, …), as PostgREST splits them.
        An upload's file is staged as the body arrives (files.py)."""
        query = request.query_params.multi_items()
        if identity.authenticated and self.files.streams_upload(request,
                                                                request.path_params["name"]):
            args = await self.files.receive_upload(request, identity)
            if isinstance(args.get("p_content"), StagedUpload):
                request.state.staged = args["p_content"]
            return args, []
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
        if _nesting(body) > MAX_NESTING:
            raise ValueError(f"the body is nested more than {MAX_NESTING} levels deep")
        try:
            args = json.loads(body)
        except ValueError as exc:
            raise ValueError(f"the body is not valid JSON: {exc}") from exc
        if not isinstance(args, dict):
            raise ValueError("the body must be a JSON object of named arguments")
        return args

    async def _wait(self, request: Request, identity: Identity, fn: RpcFunction,
                    args: dict[str, Any], fetch_with: Callable[[dict[str, Any]], Callable[[], T]]
                    ) -> T:
        """``fetch_with(args)()``'s answer; for a long-polled function with
        `Prefer: wait=N`, the first non-empty one within N seconds (live.py)."""
        wait = _PREFER_WAIT.search(request.headers.get("prefer", ""))
        session_id = _canonical_uuid(args.get("p_session_id"))
        user = user_of(identity)
        if fn.name not in LONG_POLL or not wait or not session_id:
            async with self.limits.db_slot(user):
                return await run_in_threadpool(fetch_with(args))
        key = (fn.name, identity.role, user, request.method,
               json.dumps(args, sort_keys=True, default=str),
               tuple(request.query_params.multi_items()),
               *(request.headers.get(h) for h in ("accept", "range", "prefer")))
        cursor_fn = self.catalog["session_cursor"]

        def cursor() -> int:
            return int(self.db.call_function(cursor_fn, {"p_session_id": session_id}, identity.role,
                                    identity.claims) or 0)
        return await self.live.wait(session_id, user, key, _wait_seconds(wait.group(1)),
                                    args, fetch_with, cursor, lambda: _disconnected(request))


def _wait_seconds(digits: str) -> int:
    """`Prefer: wait=N`'s N, at most MAX_WAIT_S: a longer wait, however many
    digits it has (int() refuses more than 4,300), is the longest."""
    seconds = bigint(digits)
    return MAX_WAIT_S if seconds is None else min(seconds, MAX_WAIT_S)


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _dumps(value: Any) -> str:
    # Non-ASCII text as UTF-8, not \uXXXX: escapes only where JSON needs them.
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def _nesting(body: bytes) -> int:
    """How deeply the JSON in ``body`` nests, counted without parsing it (a
    bracket inside a string counts too: an overestimate only refuses absurd
    bodies). Deep nesting would exhaust the parser's and the encoder's stack."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(body):
        depth += 1 if match.group() in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    return deepest


def _has_nul(value: Any) -> bool:
    """Whether a NUL is in any string (or key) of ``value``: PostgreSQL's text
    cannot hold one, and the driver would fail on it instead of the database.
    Iterative: the arguments were parsed, but may still be nested deeply."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return False


def _client_address(request: Request) -> str:
    return request.client.host if request.client else ""


def create_app(settings: Settings, dsn: str) -> Starlette:
    memory.return_freed_memory()  # before the threads that pass files through start
    feed = ChangeFeed(dsn)
    gateway = Gateway(GatewayDatabase(dsn), feed,
                      AddressThrottle(settings.login_attempts_per_minute),
                      LongPolls(feed, settings.long_polls, settings.long_polls_per_user),
                      settings.response_budget_bytes,
                      UserLimits(settings.requests_per_user, settings.db_slots_per_user),
                      settings.max_body_bytes)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(gateway.load)
        gateway.feed.start()
        # Off the public origin: on its own port, 127.0.0.1 by default.
        metrics.serve_metrics(settings.metrics_host, settings.gateway_metrics_port,
                              metrics.GATEWAY, "PG_SHELL_GATEWAY_METRICS_PORT")
        stop_metrics = threading.Event()
        metrics.follow(metrics.GATEWAY_QUEUE_DEPTH, lambda: queue_depth(gateway.db),
                       settings.metrics_interval_s, stop_metrics)
        yield
        stop_metrics.set()
        gateway.feed.stop()
        gateway.db.close()

    def body_limit(scope: Scope) -> int:
        return (settings.max_upload_bytes if gateway.upload_allowed(scope)
                else settings.max_body_bytes)

    return Starlette(
        routes=[
            Route("/rpc/{name:str}", gateway.rpc, methods=["GET", "POST"]),
            Mount("/", openapi.RootWithDescription(
                StaticFiles(directory=Path(settings.html_dir), html=True),
                lambda: openapi.describe(gateway.catalog, gateway.columns))),
        ],
        middleware=[Middleware(BodyLimit, limit_of=body_limit),
                    Middleware(SecurityHeaders)],
        lifespan=lifespan,
    )
