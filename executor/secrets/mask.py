"""Secret values masked in what is stored: output as it streams, and the
state a command leaves.

Output comes in pieces, and a value may be split across two of them. So
the tail of what came that could be the start of a value is held back until
the next piece (or the end) tells whether it was: a piece ending in "ab"
while a secret is "abcd" is stored without "ab" until more comes. Only the
literal value is masked: a command that prints it transformed (reversed,
base64) is not caught, as in any system that masks output."""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"


class SecretMask:
    def __init__(self, values: Iterable[str]) -> None:
        # Longest first, so one value inside another is masked as the longer.
        self._values = sorted({v for v in values if v}, key=len, reverse=True)
        if not self._values:
            raise ValueError("a mask needs at least one value")
        self._pattern = re.compile("|".join(map(re.escape, self._values)))
        self._held = ""

    def text(self, text: str) -> str:
        """Text that is not streamed (a directory, a variable's value), masked."""
        return self._pattern.sub(MASK, text)

    def feed(self, piece: str) -> str:
        """What of the stream so far may be stored, masked."""
        data = self._pattern.sub(MASK, self._held + piece)
        keep = self._open_tail(data)
        self._held = data[len(data) - keep:] if keep else ""
        return data[:len(data) - keep]

    def flush(self) -> str:
        """The end of the stream: what was held back was no value."""
        held, self._held = self._held, ""
        return held

    def _open_tail(self, data: str) -> int:
        """Length of the longest end of ``data`` that a value begins with."""
        longest = 0
        for value in self._values:
            # Candidates start with the value's first character, within reach
            # of the end; checked from the earliest (the longest tail).
            start = max(len(data) - len(value) + 1, 0)
            while (at := data.find(value[0], start)) != -1:
                if len(data) - at <= longest:
                    break
                if value.startswith(data[at:]):
                    longest = len(data) - at
                    break
                start = at + 1
        return longest
