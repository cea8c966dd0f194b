"""The executor's end of the protocol with the sandbox's supervisor.

Pure logic, no docker. sandbox-image/supervisor.py documents the frames: a type
byte, a 4-byte big-endian length, a payload. The runner feeds the container's
stdout into a ``Conversation``, which hands output to the capper, keeps the
state report and exit status, collects the file manifest, and answers the
supervisor's one question ("which files do you want?") through the
``FileReceiver`` it was given. Everything in a frame is tenant data until
validated (executor/workspace/capture.py for files, state.py for the state).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .output import OutputCapper

# The supervisor's PROTOCOL this end speaks (an image with another is refused as a template's).
PROTOCOL = 1
HEADER = struct.Struct(">cI")
MAX_PAYLOAD = 8 * 1024 * 1024  # a manifest batch is at most ~300 KiB; output frames are 64 KiB
MAX_SKIPPED = 100  # the scan's skipped entries kept (the M frame lists as many)
KNOWN = frozenset(b"osSxnmMfdFrekt")
SEQ = struct.Struct(">I")


class ProtocolError(Exception):
    """The container's stdout broke the frame protocol."""


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def json_frame(kind: bytes, obj: object) -> bytes:
    return frame(kind, json.dumps(obj, separators=(",", ":")).encode())


def input_frame(seq: int, data: bytes) -> bytes:
    """Input ``seq`` for the command (its terminal or stdin pipe)."""
    return frame(b"i", SEQ.pack(seq) + data)


def end_of_input_frame(seq: int) -> bytes:
    return frame(b"z", SEQ.pack(seq))


def window_frame(cols: int, rows: int) -> bytes:
    return json_frame(b"w", {"cols": cols, "rows": rows})


def stop_frame() -> bytes:
    """Stop the command now: the supervisor kills every process of the
    tenant, then reports and saves the files as for a command that ended."""
    return frame(b"K")


class FrameDecoder:
    """Splits a byte stream into (kind, payload) frames, whatever the chunking."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self._buf += data
        frames: list[tuple[bytes, bytes]] = []
        while len(self._buf) >= HEADER.size:
            kind, length = HEADER.unpack_from(self._buf)
            if kind[0] not in KNOWN or length > MAX_PAYLOAD:
                raise ProtocolError(f"bad frame header {bytes(self._buf[:HEADER.size])!r}")
            if len(self._buf) < HEADER.size + length:
                break
            frames.append((kind, bytes(self._buf[HEADER.size:HEADER.size + length])))
            del self._buf[:HEADER.size + length]
        return frames

    @property
    def pending(self) -> int:
        return len(self._buf)


class FileReceiver(Protocol):
    """What the runner asks about a command's files (executor/workspace/capture.py).

    ``max_entries``: the most manifest entries it accepts (the conversation
    keeps no more, and the supervisor stops its walk past them);
    ``scan()``: what the supervisor is to walk once the command ended (the
    answer to its n frame): ``known``, {directory: digest of its entries}
    of what the receiver knows (the supervisor sends a directory that still
    hashes to it as unchanged), and, if the receiver knows which
    directories changed, ``changed`` and ``held``;
    ``known``: the digests of the last ``scan()``;
    ``expected_bytes``: what the files it asked for hold, by the manifest
    (the capture's deadline grows with it)."""

    max_entries: int | None
    known: dict[str, str]
    expected_bytes: int

    def scan(self) -> dict[str, Any]: ...
    def wanted(self, manifest: list[list[Any]], scan: ScanReport) -> list[str]: ...
    def begin(self, path: str) -> None: ...
    def data(self, chunk: bytes) -> None: ...
    def end(self, ok: bool, error: str | None) -> None: ...


class InputFeed(Protocol):
    """Where a command's input comes from (executor/worker/input_feed.py):
    started once the command is handed over, told what the supervisor
    reports of it, stopped when the command is over."""

    def start(self, send: Callable[[bytes], None]) -> None: ...
    def delivered(self, seq: int, echo: bool) -> None: ...
    def echo_changed(self, echo: bool) -> None: ...
    def last_input(self) -> float: ...  # time.monotonic() of the last input delivered
    def stop(self) -> None: ...


@dataclass
class ScanReport:
    """What the supervisor's M frame says about its walk, besides the entries."""

    entries: int = 0  # entries received (kept or not), [directory] items not counted
    over: bool = False  # more entries than the receiver's max_entries
    failed: list[Any] | None = None  # [path, why]: a directory that could not be listed
    skipped_more: int = 0  # skipped entries beyond those listed


@dataclass
class Conversation:
    """One container's frames, as they arrive."""

    capper: OutputCapper
    files: FileReceiver | None = None
    reply: Callable[[bytes], None] = lambda _data: None
    inputs: InputFeed | None = None
    state: bytes | None = None
    state_overflow: bool = False
    status: int | None = None
    oom: bool | None = None
    manifest: list[list[Any]] = field(default_factory=list)
    manifest_done: bool = False
    skipped: list[Any] = field(default_factory=list)
    scan: ScanReport = field(default_factory=ScanReport)
    restore_error: str | None = None
    restored: bool = False
    ended: bool = False
    _decoder: FrameDecoder = field(default_factory=FrameDecoder)

    def feed(self, data: bytes) -> str:
        """Returns the output text these bytes carry ('' if none)."""
        text: list[str] = []
        for kind, payload in self._decoder.feed(data):
            if kind == b"o":
                text.append(self.capper.feed(1, payload))
            else:
                self._control(kind, payload)
        return "".join(text)

    def _control(self, kind: bytes, payload: bytes) -> None:
        if kind == b"s":
            self.state = payload
        elif kind == b"S":
            self.state_overflow = True
        elif kind == b"x":
            report = _json(payload)
            self.status = int(report["status"])
            self.oom = report["oom"] if isinstance(report.get("oom"), bool) else None
        elif kind == b"n":
            self.reply(json_frame(b"D", self.files.scan() if self.files is not None
                                  else {"known": {}}))
        elif kind == b"m":
            batch = _json(payload)
            if not isinstance(batch, list):
                raise ProtocolError("a manifest batch is not a list")
            # [directory] (one found unchanged) stands for entries already counted.
            self.scan.entries += sum(1 for item in batch
                                     if not (isinstance(item, list) and len(item) == 1))
            limit = self.files.max_entries if self.files is not None else None
            if limit is not None and self.scan.entries > limit:
                self.scan.over = True
            if limit is not None and self.files is not None:
                # Kept no further: memory stays bounded by the cap (and one
                # [directory] for each directory the receiver knows).
                cap = limit + len(self.files.known)
                batch = batch[:max(0, cap - len(self.manifest))]
            self.manifest.extend(batch)
        elif kind == b"M":
            self.manifest_done = True
            report = _json(payload)
            if not isinstance(report, dict):
                raise ProtocolError("the manifest's end is not an object")
            skipped = report.get("skipped") or []
            self.skipped = list(skipped[:MAX_SKIPPED]) if isinstance(skipped, list) else []
            failed = report.get("failed")
            self.scan.failed = failed if isinstance(failed, list) and len(failed) == 2 else None
            more = report.get("skipped_more")
            self.scan.skipped_more = more if isinstance(more, int) and more > 0 else 0
            self.scan.over = self.scan.over or report.get("over") is True
            if self.files is not None:
                paths = self.files.wanted(self.manifest, self.scan)
                self.manifest = []  # the receiver holds what it needs of it
                self.reply(json_frame(b"q", {"paths": paths}))
        elif kind == b"f" and self.files is not None:
            self.files.begin(str(_json(payload)["path"]))
        elif kind == b"d" and self.files is not None:
            self.files.data(payload)
        elif kind == b"F" and self.files is not None:
            end = _json(payload)
            self.files.end(bool(end.get("ok")), end.get("error"))
        elif kind == b"r":
            end = _json(payload)
            self.restored = bool(end.get("ok"))
            self.restore_error = None if self.restored else str(end.get("error"))
        elif kind == b"e":
            self.ended = True
        elif kind == b"k" and self.inputs is not None:
            ack = _json(payload)
            self.inputs.delivered(int(ack["seq"]), ack.get("echo") is not False)
        elif kind == b"t" and self.inputs is not None:
            # Before the output read after the change: a prompt for a
            # password reaches the database only once its input is redacted.
            self.inputs.echo_changed(_json(payload).get("echo") is not False)


def _json(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise ProtocolError(f"a control frame is not JSON: {exc}") from exc
