"""Slow clients are dropped: uvicorn's HTTP/1.1 protocol (h11) times out an
idle keep-alive connection, but not a request that is half sent, so one
client could hold a connection forever by sending a header line now and
then. This protocol adds two deadlines:

- the request headers must be complete within `header_timeout_s` of the
  connection opening or of the previous answer (trickling bytes does not
  extend it);
- a request body that stalls for `idle_timeout_s` is dropped (each chunk
  re-arms it).

A request whose bytes have all arrived is never timed out here: a long-poll
waits for the database, not for its client."""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


class GuardedH11Protocol(H11Protocol):
    header_timeout_s = 10.0
    idle_timeout_s = 10.0
    guard: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.arm(self.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self.arm(self.idle_timeout_s)
        elif state is not h11.IDLE:  # the request is complete (or the connection ends)
            self.disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is not h11.DONE:
            self.arm(self.header_timeout_s)  # the next request's headers get the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        super().connection_lost(exc)

    def arm(self, delay_s: float) -> None:
        self.disarm()
        self.guard = self.loop.call_later(delay_s, self.drop)

    def disarm(self) -> None:
        if self.guard is not None:
            self.guard.cancel()
            self.guard = None

    def drop(self) -> None:
        self.guard = None
        if self.transport.is_closing() or self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            return
        log.info("closing a connection from %s: its request was not sent in time",
                 self.client[0] if self.client else "?")
        self.transport.close()


def guarded_protocol(header_timeout_s: float, idle_timeout_s: float) -> type[H11Protocol]:
    """The protocol class to give uvicorn (`http=`), with these deadlines."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"header_timeout_s": header_timeout_s, "idle_timeout_s": idle_timeout_s})
