"""Secret values masked in what is stored: output as it streams, and the
state a command leaves.

Output comes in pieces, and a value may be split across two of them. So
the end of what came that could be the start of a value is held back,
unmasked, until the next piece (or the end) tells whether it was: a piece
ending in "ab" while a secret is "abcd" is stored without "ab" until more
comes. Masking what is let through is then exactly masking the whole text,
also when one value holds another (a URL that holds a password). Only the
literal value is masked (and, on a terminal, its lines as the terminal ends
them): a command that prints it transformed (reversed, base64) is not
caught, as in any system that masks output."""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
# The first characters of a value that a place in the output must match
# before the rest is compared: found by str.find, so the search runs at C
# speed however the output is made.
_PROBE = 32


class SecretMask:
    def __init__(self, values: Iterable[str], terminal: bool = False) -> None:
        found = {v for v in values if v}
        if terminal:  # a terminal sends each newline as \r\n
            found |= {v.replace("\n", "\r\n") for v in found}
        # Longest first, so one value inside another is masked as the longer.
        self._values = sorted(found, key=len, reverse=True)
        if not self._values:
            raise ValueError("a mask needs at least one value")
        self._pattern = re.compile("|".join(map(re.escape, self._values)))
        self._held = ""

    def text(self, text: str) -> str:
        """Text that is not streamed (a directory, a variable's value), masked."""
        return self._pattern.sub(MASK, text)

    def feed(self, piece: str) -> str:
        """What of the stream so far may be stored, masked."""
        data = self._held + piece
        hold = self._hold_from(data, 0)
        out: list[str] = []
        done = 0
        for match in self._pattern.finditer(data):
            if match.start() >= hold:
                break
            out += [data[done:match.start()], MASK]
            done = match.end()
            if done > hold:  # the held end was part of this value: look again after it
                hold = self._hold_from(data, done)
        out.append(data[done:hold])
        self._held = data[hold:]
        return "".join(out)

    def flush(self) -> str:
        """The end of the stream: what was held back, masked as it stands."""
        held, self._held = self._held, ""
        return self.text(held)

    def _hold_from(self, data: str, start: int) -> int:
        """The earliest place at or after ``start`` from which the rest of
        ``data`` begins a value without being one (len(data): none)."""
        end = earliest = len(data)
        for value in self._values:
            probe = value[:_PROBE]
            first = max(start, end - len(value) + 1)  # nearer the end than a whole value
            # Where the whole probe fits: found at C speed, then compared.
            at = first
            while at < earliest and (at := data.find(probe, at, end)) != -1 and at < earliest:
                if value.startswith(data[at:]):
                    earliest = at
                    break
                at += 1
            # The last few places, where only part of the probe fits.
            for at in range(max(first, end - len(probe) + 1), earliest):
                if value.startswith(data[at:]):
                    earliest = at
                    break
        return earliest
