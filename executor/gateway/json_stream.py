"""A JSON object of named arguments read as it arrives, one of whose values
(an upload's bytea) is not kept but handed on in pieces: the gateway never
holds a whole file, however the client sends it.

`ArgumentReader.feed` takes the body a piece at a time. Every other value
is small (at most `max_value` bytes of JSON) and parsed whole at its end;
the streamed key's string is decoded as it goes: JSON's escapes first, then
PostgreSQL's bytea input (`\\x` and hex digits, whitespace allowed between
pairs, or the escape format), and its bytes go to `deliver`. Errors are
ValueError with the message a client sees (400): ByteaError with
PostgreSQL's SQLSTATE and message for bytea it would refuse, NulInText
(22P05, as PostgreSQL answers a NUL in text), else a malformed body."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from typing import Any

_WHITESPACE = b" \t\n\r"
# PostgreSQL's hex format: pairs of digits, its four whitespace characters before any pair.
_SPACES = re.compile(rb"[ \t\n\r]+")
_NOT_HEX_OR_SPACE = re.compile(rb"[^0-9A-Fa-f \t\n\r]")
_STRING_SPECIAL = re.compile(rb'["\\]')
_SIMPLE_ESCAPES = {ord('"'): b'"', ord("\\"): b"\\", ord("/"): b"/", ord("b"): b"\b",
                   ord("f"): b"\f", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t"}
_ESCAPE = re.compile(rb"\\(\\|[0-3][0-7][0-7])?")  # \\ or \ooo; a lone \ is an error
_ESCAPE_PREFIX = re.compile(rb"\\(?:[0-3][0-7]?)?")  # what could still become one
MAX_NESTING = 64


class ByteaError(ValueError):
    """Bytea input PostgreSQL would refuse, with its SQLSTATE and message."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class NulInText(ValueError):
    """A \\u0000 in a string: PostgreSQL's text cannot hold it."""


class STREAMED:
    """Marks the streamed key's value among the arguments: its bytes went to `deliver`."""


class ByteaText:
    """PostgreSQL's bytea input, decoded as its text arrives."""

    def __init__(self, deliver: Callable[[bytes], None]) -> None:
        self.deliver = deliver
        self.mode: str | None = None  # "hex" or "escape", known from the first two bytes
        self.pending = b""
        self.text = codecs.getincrementaldecoder("utf-8")()  # escape format: text is UTF-8

    def feed(self, data: bytes) -> None:
        self.pending += data
        if self.mode is None:
            if len(self.pending) < 2:
                return
            self.mode = "hex" if self.pending[:2] == b"\\x" else "escape"
            if self.mode == "hex":
                self.pending = self.pending[2:]
        if self.mode == "hex":
            self._hex(final=False)
        else:
            self._escape(final=False)

    def close(self) -> None:
        if self.mode is None:
            self.mode = "escape"  # "" or one byte
        if self.mode == "hex":
            self._hex(final=True)
        else:
            self._escape(final=True)

    def _hex(self, final: bool) -> None:
        # Plain searches only: a regular expression that repeats a group
        # keeps state per repetition (22 MB for 256 KiB of hex).
        text = self.pending
        bad = _NOT_HEX_OR_SPACE.search(text)
        end = bad.start() if bad else len(text)
        position = digits = 0
        for run in _SPACES.finditer(text, 0, end):
            digits += run.start() - position
            if digits % 2:  # whitespace inside a pair of digits
                raise ByteaError("22023", f'invalid hexadecimal digit: "{chr(text[run.start()])}"')
            position = run.end()
        if bad:
            shown = text[end:end + 4].decode("utf-8", "ignore")[:1] or "?"
            raise ByteaError("22023", f'invalid hexadecimal digit: "{shown}"')
        clean = text.translate(None, _WHITESPACE) if position else text
        self.pending = b""
        if len(clean) % 2:
            if final:
                raise ByteaError("22023", "invalid hexadecimal data: odd number of digits")
            clean, self.pending = clean[:-1], clean[-1:]  # an unpaired digit waits for its pair
        self.deliver(bytes.fromhex(clean.decode("ascii")))

    def _escape(self, final: bool) -> None:
        text = self.pending
        position = 0
        cut = len(text)
        decoded: list[bytes] = []
        for match in _ESCAPE.finditer(text):
            if match.group(1) is None:
                if not final and _ESCAPE_PREFIX.fullmatch(text, match.start()):
                    cut = match.start()  # cut by the piece's end: waits for the rest
                    break
                raise ByteaError("22P02", "invalid input syntax for type bytea")
            decoded.append(text[position:match.start()])
            escape = match.group(1)
            decoded.append(b"\\" if escape == b"\\" else bytes([int(escape, 8)]))
            position = match.end()
        decoded.append(text[position:cut])
        self.pending = text[cut:]
        try:
            self.text.decode(text[:cut], final)
        except UnicodeDecodeError as exc:
            raise ValueError("the body is not valid UTF-8") from exc
        self.deliver(b"".join(decoded))


class ArgumentReader:
    """A JSON object whose ``streamed`` key's string goes to ``deliver`` in
    pieces (see the module's comment)."""

    def __init__(self, streamed: str, deliver: Callable[[bytes], None], max_value: int) -> None:
        self.streamed = streamed
        self.bytea = ByteaText(deliver)
        self.max_value = max_value
        self.args: dict[str, Any] = {}
        self.state = "start"
        self.key = ""
        self.raw = bytearray()  # the current key or small value, as JSON text
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.escape = b""  # a JSON escape in the streamed string, cut by a piece's end
        self.high_surrogate: int | None = None
        self.seen = False  # the streamed key's string was read

    def feed(self, data: bytes) -> None:
        i = 0
        while i < len(data):
            if self.state == "string":
                i = self._string(data, i)
                continue
            byte = data[i]
            if self.state in ("raw", "key"):
                i = self._raw(data, i)
                continue
            i += 1
            if byte in _WHITESPACE:
                continue
            self._token(byte)

    def close(self) -> dict[str, Any]:
        if self.state == "raw" and self.depth == 0 and not self.in_string:
            self._value_end()
        if self.state != "done":
            raise ValueError("the body is not valid JSON: it ends before the object does")
        return self.args

    def _token(self, byte: int) -> None:
        char = chr(byte)
        if self.state == "start" and char == "{":
            self.state = "first"
        elif self.state in ("first", "key_next") and char == '"':
            self.state, self.raw = "key", bytearray(b'"')
            self.in_string, self.escaped = True, False
        elif self.state == "first" and char == "}":
            self.state = "done"
        elif self.state == "colon" and char == ":":
            self.state = "value"
        elif self.state == "value":
            if self.key == self.streamed and char == '"':
                if self.seen:
                    raise ValueError(f"{self.streamed} is given twice")
                self.state, self.seen = "string", True
                self.args[self.streamed] = STREAMED
                return
            self.state, self.raw, self.depth = "raw", bytearray(), 0
            self.in_string = self.escaped = False
            self._raw(bytes([byte]), 0)
        elif self.state == "after" and char == ",":
            self.state = "key_next"
        elif self.state == "after" and char == "}":
            self.state = "done"
        elif self.state == "start" or self.state == "done":
            raise ValueError("the body must be a JSON object of named arguments")
        else:
            raise ValueError(f"the body is not valid JSON: unexpected {char!r}")

    def _raw(self, data: bytes, i: int) -> int:
        """A key or a small value, up to its end; returns where it stopped."""
        start = i
        while i < len(data):
            c = data[i]
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == ord("\\"):
                    self.escaped = True
                elif c == ord('"'):
                    self.in_string = False
                    if self.depth == 0:
                        i += 1
                        self.raw += data[start:i]
                        self._value_end()
                        return i
            elif c == ord('"'):
                self.in_string = True
            elif c in b"[{":
                self.depth += 1
                if self.depth > MAX_NESTING:
                    raise ValueError(f"the body is nested more than {MAX_NESTING} levels deep")
            elif c in b"]}" and self.depth > 0:
                self.depth -= 1
                if self.depth == 0:
                    i += 1
                    self.raw += data[start:i]
                    self._value_end()
                    return i
            elif self.depth == 0 and (c in b",}" or c in _WHITESPACE):
                self.raw += data[start:i]
                self._value_end()
                return i
            i += 1
        self.raw += data[start:i]
        if len(self.raw) > self.max_value:
            raise ValueError(f"an argument other than {self.streamed} is longer than "
                             f"{self.max_value} bytes")
        return i

    def _value_end(self) -> None:
        try:
            value = json.loads(bytes(self.raw))
        except ValueError as exc:
            raise ValueError(f"the body is not valid JSON: {exc}") from exc
        if self.state == "key":
            self.key = value
            self.state = "colon"
            return
        if self.key == self.streamed and self.seen:
            raise ValueError(f"{self.streamed} is given twice")
        self.args[self.key] = value
        self.state = "after"

    def _string(self, data: bytes, i: int) -> int:
        """The streamed string from ``i``: plain runs in bulk, escapes one by one."""
        if self.escape:
            return self._escape_more(data, i)
        match = _STRING_SPECIAL.search(data, i)
        end = match.start() if match else len(data)
        if end > i:
            self._plain(data[i:end])
        if match is None:
            return end
        if data[end] == ord('"'):
            self._surrogate_done()
            self.bytea.close()
            self.state = "after"
            return end + 1
        self.escape = b"\\"
        return self._escape_more(data, end + 1)

    def _plain(self, text: bytes) -> None:
        self._surrogate_done()
        self.bytea.feed(text)

    def _escape_more(self, data: bytes, i: int) -> int:
        need = 6 if self.escape[1:2] == b"u" or (len(self.escape) == 1 and data[i:i + 1] == b"u") \
            else 2
        take = need - len(self.escape)
        self.escape += data[i:i + take]
        i += min(take, len(data) - i)
        if len(self.escape) < need:
            return i
        escape, self.escape = self.escape, b""
        if need == 2:
            if escape[1] not in _SIMPLE_ESCAPES:
                raise ValueError("the body is not valid JSON: an invalid escape in a string")
            self._plain(_SIMPLE_ESCAPES[escape[1]])
            return i
        try:
            code = int(escape[2:].decode("ascii"), 16)
        except ValueError as exc:
            raise ValueError("the body is not valid JSON: an invalid \\u escape") from exc
        if code == 0:
            raise NulInText("unsupported Unicode escape sequence")
        if 0xD800 <= code < 0xDC00:
            self._surrogate_done()
            self.high_surrogate = code
            return i
        if 0xDC00 <= code < 0xE000:
            if self.high_surrogate is None:
                raise ValueError("the body is not valid JSON: a lone surrogate")
            code = 0x10000 + ((self.high_surrogate - 0xD800) << 10) + (code - 0xDC00)
            self.high_surrogate = None
        self._plain(chr(code).encode())
        return i

    def _surrogate_done(self) -> None:
        if self.high_surrogate is not None:
            raise ValueError("the body is not valid JSON: a lone surrogate")
