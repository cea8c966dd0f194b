"""Request bodies past a limit are refused before they are read: from
Content-Length at once, and while a body without one (chunked) streams, as
soon as it passes the limit. Nothing beyond the limit is ever buffered, so
an anonymous client cannot make the gateway hold a body of its choosing.

An ASGI middleware, outermost: it answers 413 itself (PostgREST's error
shape) when the application has not started its answer yet."""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Which limit a request gets: its scope → the largest body it may send.
LimitOf = Callable[[Scope], int]


class BodyTooLarge(Exception):
    """The body passed its limit while streaming."""


class BodyLimit:
    def __init__(self, app: ASGIApp, limit_of: LimitOf) -> None:
        self.app = app
        self.limit_of = limit_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_of(scope)
        declared = _content_length(scope)
        if declared is None and _has_header(scope, b"content-length"):
            await _refuse(send, 400, "PGRST102", "the Content-Length header is not a number")
            return
        if declared is not None and declared > limit:
            await _refuse(send, 413, "PT413", _too_large(limit))
            return
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except* BodyTooLarge:  # grouped when it crossed a task group (anyio, a streamed answer)
            if not started:
                await _refuse(send, 413, "PT413", _too_large(limit))


def _too_large(limit: int) -> str:
    return f"the request body is larger than {limit} bytes"


def _has_header(scope: Scope, name: bytes) -> bool:
    return any(key.lower() == name for key, _ in scope["headers"])


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"code": code, "message": message, "details": None,
                       "hint": None}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
