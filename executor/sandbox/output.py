"""Turn a container's multiplexed byte stream into capped text.

Pure logic, no docker: the runner feeds (stream, bytes) frames in arrival
order and gets back text pieces for the caller, with

* the state report (marker + JSON, stdout only) cut out of stdout,
* each stream decoded incrementally as UTF-8 with errors="replace", so a
  multibyte character split across frames (or interleaved with the other
  stream) is decoded whole and invalid bytes never raise,
* output capped at ``cap`` bytes with a visible marker; later bytes are
  counted and dropped, so memory stays bounded however much a command writes.
"""

from __future__ import annotations

import codecs

STDOUT = 1
STDERR = 2

# Bound on the state report (cwd + NAME=value pairs). A valid env is at
# most 256 KiB; anything far beyond is rejected without being kept.
MAX_STATE_BYTES = 1024 * 1024


def state_marker(nonce: str) -> bytes:
    """The line the in-container entrypoint prints before its state report.

    It starts with a NUL byte so ordinary text output almost never looks like
    the start of a marker (which would be held back until disambiguated).
    """
    return b"\0pg-shell-state " + nonce.encode("ascii") + b"\n"


def state_end_marker(nonce: str) -> bytes:
    """What ends a complete state report."""
    return b"\0pg-shell-end " + nonce.encode("ascii") + b"\n"


def truncation_notice(cap: int) -> str:
    return f"\n[pg-shell: output truncated at {cap} bytes]\n"


class StateExtractor:
    """Finds the state marker in stdout and keeps what follows it.

    Bytes that might be the start of a marker split across frames are held
    back (at most len(marker) - 1 bytes) and released once they turn out to
    be ordinary output.
    """

    def __init__(self, nonce: str) -> None:
        self._marker = state_marker(nonce)
        self._end = state_end_marker(nonce)
        self._held = b""
        self._state: bytearray | None = None
        self.state_overflow = False

    @property
    def found(self) -> bool:
        return self._state is not None

    def feed(self, data: bytes) -> bytes:
        """Return the part of ``data`` that is command output."""
        if self._state is not None:
            self._keep_state(data)
            return b""
        buf = self._held + data
        idx = buf.find(self._marker)
        if idx >= 0:
            self._held = b""
            self._state = bytearray()
            self._keep_state(buf[idx + len(self._marker):])
            return buf[:idx]
        keep = self._partial_marker_suffix(buf)
        self._held = buf[len(buf) - keep:] if keep else b""
        return buf[: len(buf) - keep]

    def finish(self) -> bytes:
        """End of stream: release bytes held back as a possible marker."""
        held, self._held = self._held, b""
        return held

    def state_bytes(self) -> bytes | None:
        """The report between the markers, or None if no complete one arrived."""
        if self._state is None:
            return None
        report, end, _ = bytes(self._state).partition(self._end)
        return report if end else None

    def _keep_state(self, data: bytes) -> None:
        assert self._state is not None
        room = MAX_STATE_BYTES - len(self._state)
        if len(data) > room:
            self.state_overflow = True
            data = data[: max(room, 0)]
        self._state += data

    def _partial_marker_suffix(self, buf: bytes) -> int:
        # Longest suffix of buf that is a proper prefix of the marker. The
        # marker starts with NUL, so for text output this is almost always 0.
        for k in range(min(len(self._marker) - 1, len(buf)), 0, -1):
            if buf.endswith(self._marker[:k]):
                return k
        return 0


class OutputCapper:
    """Decodes output per stream and enforces the byte cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total_bytes = 0  # everything the command wrote
        self.kept_bytes = 0
        self.truncated = False
        self._decoders = {
            STDOUT: codecs.getincrementaldecoder("utf-8")(errors="replace"),
            STDERR: codecs.getincrementaldecoder("utf-8")(errors="replace"),
        }

    def feed(self, stream: int, data: bytes) -> str:
        """Return the text to pass on for this frame ('' if none)."""
        if not data:
            return ""
        self.total_bytes += len(data)
        if self.truncated:
            return ""  # still drained by the caller, just not kept
        decoder = self._decoders.get(stream, self._decoders[STDOUT])
        room = self.cap - self.kept_bytes
        if len(data) <= room:
            self.kept_bytes += len(data)
            return decoder.decode(data)
        self.truncated = True
        self.kept_bytes += room
        # A character cut in half at the cap stays in the decoder and is
        # dropped with the rest.
        return decoder.decode(data[:room]) + truncation_notice(self.cap)

    def finish(self) -> str:
        """Flush incomplete trailing sequences (as U+FFFD) at end of output."""
        if self.truncated:
            return ""
        return "".join(d.decode(b"", final=True) for d in self._decoders.values())
