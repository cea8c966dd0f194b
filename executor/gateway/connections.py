"""Slow clients are dropped: uvicorn's HTTP/1.1 protocol (h11) times out an
idle keep-alive connection, but not a request that is half sent, so one
client could hold a connection forever by sending a header line now and
then. This protocol adds two deadlines:

- the request headers must be complete within `header_timeout_s` of the
  connection opening or of the previous answer (trickling bytes does not
  extend it);
- a request body that stalls for `idle_timeout_s` is dropped (each chunk
  re-arms it);
- a request body must keep up an average of `min_body_rate` bytes a second
  once `idle_timeout_s` has passed: a byte now and then re-arms the stall
  deadline, but does not hold a connection for as long as it likes.

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
    min_body_rate = 16 * 1024  # bytes a second
    guard: asyncio.TimerHandle | None = None
    body_started: float | None = None  # loop time the request's body began
    body_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.arm(self.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self.arm(min(self.idle_timeout_s, self.body_deadline(len(data)) - self.loop.time()))
        elif state is not h11.IDLE:  # the request is complete (or the connection ends)
            self.body_started = None
            self.disarm()

    def body_deadline(self, received: int) -> float:
        """When the body so far would fall below the minimum rate."""
        if self.body_started is None:
            self.body_started, self.body_bytes = self.loop.time(), 0
        self.body_bytes += received
        return self.body_started + self.idle_timeout_s + self.body_bytes / self.min_body_rate

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


def guarded_protocol(header_timeout_s: float, idle_timeout_s: float,
                     min_body_rate: int) -> type[H11Protocol]:
    """The protocol class to give uvicorn (`http=`), with these deadlines."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"header_timeout_s": header_timeout_s, "idle_timeout_s": idle_timeout_s,
                 "min_body_rate": min_body_rate})
