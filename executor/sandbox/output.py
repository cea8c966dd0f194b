"""Turn a command's output bytes into capped text.

Pure logic, no docker: the runner feeds output frames in arrival order and
gets back text pieces for the caller, with

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

def truncation_notice(cap: int) -> str:
    return f"\n[pg-shell: output truncated at {cap} bytes]\n"


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
