"""Watching one run: read its frames until the container is done, while
enforcing the time limit on the command, the capture limit on the file scan
after it, and the cancel flag. Pure of docker: killing is the caller's."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable

from .model import Limits, RunRequest
from .protocol import Conversation, ProtocolError

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often cancel/deadline are checked while output is quiet
STREAM_GRACE_S = 2.0  # how long to wait for the output stream after exit
# How long a command told to stop (its processes killed by the supervisor,
# which then saves its files) may take to say it ended before its container
# is killed, and its files with it.
STOP_GRACE_S = 5.0
SIGNALLED = 128  # a shell's status from here up: 128 + the signal that ended it
# (stream, bytes) pieces of the container's output; None: the stream ended.
Frames = queue.Queue[tuple[int, bytes] | None]

OnOutput = Callable[[str], None]


def exit_needed(conversation: Conversation) -> bool:
    """Whether a run whose supervisor ended the conversation must still wait
    for its container's exit: when the shell reported no status, or died by
    a signal that the supervisor could not tell the OOM killer's or not (the
    engine then tells, after the exit). Otherwise the exit (the engine
    tearing the container down) is not worth a command's time."""
    status = conversation.status
    return status is None or (status >= SIGNALLED and conversation.oom is None)


def files_deadline_s(base_s: float, bytes_per_s: int, expected_bytes: int) -> float:
    """How long the changed files a capture asked for may take to arrive:
    in proportion to their bytes, so a small change is never given minutes
    and a large one is not cut off at a fixed limit."""
    return base_s + expected_bytes / bytes_per_s


def pump(stream: Iterable[tuple[int, bytes]], frames: Frames,
         stop: threading.Event) -> None:
    """Moves (stream, bytes) pieces into ``frames``, then EOF; gives up once
    ``stop`` is set, so a reader nobody drains never blocks forever."""

    def put(item: tuple[int, bytes] | None) -> bool:
        while not stop.is_set():
            try:
                frames.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    try:
        for piece in stream:
            if not put(piece):
                return
    except OSError:
        pass  # the socket was closed under us: we stopped reading
    finally:
        put(None)


class Watch:
    """Reads one run's frames until the container is done, enforcing the
    time limit (on the command) and the capture limit (on the file scan
    after it), and the cancel flag.

    A command stopped (time limit, idle limit, cancel) is stopped softly:
    ``stop`` asks the supervisor to kill every process of the tenant, after
    which it saves the files as for a command that ended, so what it wrote
    is kept. Only if that does not happen within STOP_GRACE_S is the
    container killed (``kill``), and the files with it."""

    def __init__(self, kill: Callable[[str], None], limits: Limits, req: RunRequest,
                 container_id: str, started: float, cancel: threading.Event,
                 last_input: Callable[[], float] = lambda: 0.0,
                 stop: Callable[[str], None] | None = None,
                 end_input: Callable[[], None] = lambda: None) -> None:
        self.kill = kill
        self.stop = stop or kill
        # Closes the supervisor's stdin: once it ended the conversation, it
        # exits only then (sandbox-image/supervisor.py: linger).
        self.end_input = end_input
        # A terminal command has the tenant's limits: a maximum duration,
        # and an idle limit on time without input or output. Input given
        # up front leaves a command a batch one.
        terminal = req.interaction if req.interaction and req.interaction.tty else None
        self.timeout_s = terminal.max_s if terminal else limits.timeout_s
        self.idle_s = terminal.idle_s if terminal else None
        self.last_input = last_input
        self.capture_base_s = limits.capture_base_s
        self.capture_bytes_per_s = limits.capture_bytes_per_s
        self.req = req
        self.container_id = container_id
        self.started = started
        self.cancel = cancel
        self.reason: str | None = None  # why the command was stopped, if it was
        self.kill_at: float | None = None  # when a stopped command's container is killed
        self.capture_failure: str | None = None  # why the files were not captured
        self.exit_code = -1
        self.duration_s = 0.0

    def collect(self, conversation: Conversation, on_output: OnOutput,
                frames: Frames, exited: threading.Event) -> None:
        deadline = self.started + self.timeout_s
        ended_at: float | None = None  # when the command (not the capture) ended
        asked = False  # the files were asked for: the deadline knows their bytes
        stream_done = False
        exited_at: float | None = None
        last_output = self.started
        input_ended = False
        while not (stream_done and exited.is_set()):
            if conversation.ended and self.reason is None and not exit_needed(conversation):
                break  # the supervisor has said all it will: the container's exit adds nothing
            if conversation.ended and not input_ended:
                input_ended = True  # the exit is needed: let the supervisor go
                self.end_input()
            now = time.monotonic()
            if ended_at is None and conversation.status is not None:
                # The scan: its walk is bounded by the capture's entries cap.
                ended_at = now
                deadline = now + self.capture_base_s
            if ended_at is not None and not asked and conversation.manifest_done:
                # The files asked for: a deadline in proportion to their bytes.
                asked = True
                expected = conversation.files.expected_bytes if conversation.files else 0
                deadline = now + files_deadline_s(self.capture_base_s, self.capture_bytes_per_s,
                                                  expected)
            if ended_at is None:
                self._enforce(now, deadline, last_output)
            elif now >= deadline and self.capture_failure is None:
                self._capture_timeout()
            if exited.is_set() and exited_at is None:
                exited_at = now
            if exited_at is not None and now - exited_at > STREAM_GRACE_S:
                break  # exited, but something keeps the stream open: stop reading
            if stream_done:
                exited.wait(POLL_S)  # output is over; only the exit is missing
                continue
            try:
                item = frames.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if item is None:
                stream_done = True
                continue
            stream, data = item
            last_output = now
            if stream != 1:
                continue  # the supervisor writes nothing to stderr; Python's own crash would
            try:
                text = conversation.feed(data)
            except ProtocolError as exc:
                log.warning("command_id=%s: %s", self.req.command_id, exc)
                self.capture_failure = f"the sandbox broke the protocol ({exc})"
                self.reason = self.reason or "protocol error"
                self.kill(self.container_id)
                continue
            if text:
                on_output(text)
        tail = conversation.capper.finish()
        if tail:
            on_output(tail)
        self.duration_s = (ended_at or exited_at or time.monotonic()) - self.started
        if self.capture_failure is not None:
            # Its files are not saved; the command's own ending stands (the
            # exit status it had, or the reason it was stopped).
            conversation.ended = False
            if self.reason == "protocol error":
                self.reason = None

    def _enforce(self, now: float, deadline: float, last_output: float) -> None:
        """While the command runs: stops it at its limits or when cancelled,
        and kills its container if it does not stop in time."""
        if self.reason is not None:
            if self.kill_at is not None and now >= self.kill_at:
                self.kill_at = None
                self.kill(self.container_id)
        elif self.cancel.is_set():
            self._stop("cancelled")
        elif now >= deadline:
            self._stop("timeout")
        elif self.idle_s is not None and now - max(last_output, self.last_input()) >= self.idle_s:
            self._stop("idle")

    def _stop(self, reason: str) -> None:
        self.reason = reason
        self.kill_at = time.monotonic() + STOP_GRACE_S
        self.stop(self.container_id)

    def _capture_timeout(self) -> None:
        self.capture_failure = (
            f"saving them took longer than its limit ({self.capture_base_s:g} s, and 1 s "
            f"more per {self.capture_bytes_per_s // 1024} KiB of changed files)")
        self.kill(self.container_id)
