"""Input on its way to a command: what was typed (or piped), window-size
changes and the end of input, sent in the order they happened, by one
thread, one call at a time.

What arrives while a call is in flight is joined to what is waiting, so a
fast typist or a paste costs one call per round trip, not one per key (the
API allows 100 calls a second per command). A call the API refuses for its
rate (429) is made again after the wait it names, with whatever was typed
meanwhile joined on: nothing typed is lost or sent out of order. Only
after a call succeeded is what it carried taken off the queue."""

from __future__ import annotations

import threading

from executor.api_client import RateLimited
from executor.errors import ApiError

TYPE_CHECKING = False  # `typing` is not needed at run time (see executor/cli/__init__.py)
if TYPE_CHECKING:
    from typing import Any

    from executor.api_client import ApiClient

MAX_PIECE = 65536  # bytes of UTF-8 one send_input call may carry
DATA, RESIZE, EOF = "data", "resize", "eof"
ENDED = frozenset({"done", "failed", "cancelled"})


class InputQueue:
    """The items waiting, oldest first, each [kind, value]: DATA text,
    RESIZE (columns, rows), EOF. Data put after data joins it; a size put
    after a size replaces it (only the last one matters)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._items: list[list[Any]] = []
        self._closed = False  # EOF was put: no data after it
        self._stopped = False

    def put_data(self, text: str) -> None:
        with self._changed:
            if not text or self._closed:
                return
            if self._items and self._items[-1][0] == DATA:
                self._items[-1][1] += text
            else:
                self._items.append([DATA, text])
            self._changed.notify_all()

    def put_resize(self, cols: int, rows: int) -> None:
        with self._changed:
            if self._items and self._items[-1][0] == RESIZE:
                self._items[-1][1] = (cols, rows)
            else:
                self._items.append([RESIZE, (cols, rows)])
            self._changed.notify_all()

    def put_eof(self) -> None:
        with self._changed:
            if not self._closed:
                self._closed = True
                self._items.append([EOF, None])
                self._changed.notify_all()

    def stop(self) -> None:
        """Nothing more is sent; next() returns None from now on."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def next(self) -> tuple[str, Any] | None:
        """The next call to make (kind, value), left on the queue until
        sent() says it went; waits for one. None once stopped."""
        with self._changed:
            self._changed.wait_for(lambda: self._items or self._stopped)
            if self._stopped:
                return None
            kind, value = self._items[0]
            return kind, (_prefix(value, MAX_PIECE) if kind == DATA else value)

    def sent(self, kind: str, value: Any) -> None:
        """The call next() named went through: take what it carried off."""
        with self._changed:
            head = self._items[0]
            if kind == DATA:
                # Data is only ever added at the end, so what went is the head's start.
                head[1] = head[1][len(value):]
                if not head[1]:
                    self._items.pop(0)
            elif head[1] == value:  # a size that changed meanwhile is sent again
                self._items.pop(0)

    def pause(self, seconds: float) -> None:
        """Waits ``seconds``, or less if stopped meanwhile."""
        with self._changed:
            self._changed.wait_for(lambda: self._stopped, seconds)

    def pending(self) -> list[tuple[str, Any]]:
        with self._changed:
            return [(kind, value) for kind, value in self._items]


def _prefix(text: str, limit: int) -> str:
    """The longest start of ``text`` whose UTF-8 is at most ``limit`` bytes."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", "ignore")  # a character cut in two is left whole


def send_all(queue: InputQueue, client: ApiClient, command_id: int) -> None:
    """Makes the queue's calls for ``command_id`` in order until stopped, or
    until the command takes no more input because it ended (its follower
    sees the end and reports it). Raises what else the API refused."""
    while (item := queue.next()) is not None:
        kind, value = item
        try:
            if kind == DATA:
                client.send_input(command_id, value)
            elif kind == RESIZE:
                client.resize_terminal(command_id, *value)
            else:
                client.close_input(command_id)
        except RateLimited as exc:
            queue.pause(exc.retry_after)
            continue
        except ApiError as exc:
            # PT409 also says "no terminal" or "takes no input", which the user must hear of.
            if exc.code == "PT409" and client.command_status(command_id) in ENDED:
                queue.stop()
                return
            raise
        queue.sent(kind, value)
