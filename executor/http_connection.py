"""One HTTP/1.1 connection to the API, kept alive for every request a CLI
command makes: `pg-shell run` submits its command and follows it on the same
socket, and each long-poll answer is read the moment the gateway writes it.

Why not an HTTP library: the CLI's start-up is part of what a user waits for
on every command, and httpx (or even http.client, through email and ssl)
costs more to import than the whole exchange with a gateway on the same
machine. The API needs little of HTTP: POST with a body of known length,
answers with Content-Length or chunked, keep-alive. TLS (an https URL) is
set up with the standard ssl module, imported only then.

Requests that do not depend on each other's answers may be pipelined (sent
at once, answered in order): `run` reads the session's change cursor and
submits its command in one round trip.

A kept-alive connection that the server closed while it was idle is found
before a request is written on it (it reads as ready: end of file), and a
new one is opened instead. A request is never sent twice: a submitted
command must not be submitted twice."""

from __future__ import annotations

import json
import select
import socket
from urllib.parse import urlsplit

TYPE_CHECKING = False  # `typing` is not needed at run time (see executor/cli/__init__.py)
if TYPE_CHECKING:
    from typing import Any, BinaryIO

# Bounds on what a server may send before its body, so a broken one cannot
# make the client buffer without end.
MAX_LINE = 65536
MAX_HEADERS = 100


class TransportError(Exception):
    """The server could not be reached, or its answer was cut or not HTTP."""


class Response:
    """An answer: its status, headers (names in lower case) and body. A plain
    class: dataclasses imports inspect, which costs more than all of this."""

    def __init__(self, status_code: int, reason_phrase: str, headers: dict[str, str],
                 content: bytes = b"") -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.headers = headers
        self.content = content

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.content)


class Connection:
    """Requests to the server of ``url`` (http or https), one at a time."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        default_port = self.port == (443 if self.tls else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._file: BinaryIO | None = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None

    def request(self, method: str, path: str, body: bytes = b"",
                headers: dict[str, str] | None = None, timeout: float | None = None) -> Response:
        """Sends ``method`` ``path`` (below the URL's path) and reads the
        whole answer, waiting at most ``timeout`` seconds for each read."""
        return self.pipeline([(method, path, body, headers or {})], timeout)[0]

    def pipeline(self, requests: list[tuple[str, str, bytes, dict[str, str]]],
                 timeout: float | None = None) -> list[Response]:
        """Sends the requests (method, path, body, headers) at once and reads
        their answers, in order: one round trip for requests that do not
        depend on each other's answers (HTTP/1.1 pipelining)."""
        message = b"".join(self._message(*request) for request in requests)
        return self._exchange(message, len(requests), timeout)

    def _message(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        head = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}",
                f"Content-Length: {len(body)}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body

    def _exchange(self, message: bytes, answers: int, timeout: float | None) -> list[Response]:
        responses: list[Response] = []
        try:
            sock, file = self._connected()
            sock.settimeout(self.timeout if timeout is None else timeout)
            sock.sendall(message)
            while len(responses) < answers:
                if responses and responses[-1].headers.get("connection", "").lower() == "close":
                    raise ValueError("the server closed the connection after "
                                     f"{len(responses)} of {answers} answers")
                responses.append(_read_response(file))
        except _ClosedBeforeAnswer:
            self.close()
            raise TransportError("the server closed the connection after "
                                 f"{len(responses)} of {answers} answers") from None
        except TimeoutError as exc:
            self.close()
            raise TransportError("timed out waiting for the server") from exc
        except (OSError, ValueError) as exc:
            self.close()
            raise TransportError(str(exc) or type(exc).__name__) from exc
        except BaseException:
            # Ctrl-C during a long-poll: its answer may still come on this
            # socket, so the next request (the cancel) takes a new one.
            self.close()
            raise
        if responses[-1].headers.get("connection", "").lower() == "close":
            self.close()
        return responses

    def _connected(self) -> tuple[socket.socket, BinaryIO]:
        if self._sock is not None and select.select([self._sock], [], [], 0)[0]:
            self.close()  # an idle connection with something to read: the server closed it
        if self._sock is None or self._file is None:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            # Requests are small and written whole: never hold one back (Nagle).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls:
                import ssl  # only for https: it is slow to import

                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
            self._sock, self._file = sock, sock.makefile("rb")
        return self._sock, self._file


class _ClosedBeforeAnswer(Exception):
    """The connection ended before any byte of the answer."""


def _read_response(file: BinaryIO) -> Response:
    while True:
        line = file.readline(MAX_LINE + 1)
        if not line:
            raise _ClosedBeforeAnswer()
        version, _, rest = _line(line).partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise ValueError(f"not an HTTP/1.x answer: {line[:80]!r}")
        headers = _read_headers(file)
        if not 100 <= int(code) < 200:  # an interim answer (100 Continue): the real one follows
            break
    response = Response(int(code), reason, headers)
    if headers.get("transfer-encoding", "").lower() == "chunked":
        response.content = _read_chunked(file)
    elif "content-length" in headers:
        response.content = _read_exactly(file, int(headers["content-length"]))
    elif response.status_code in (204, 304):
        pass
    else:  # the body ends with the connection
        response.content = file.read()
        headers["connection"] = "close"
    if version == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
        headers["connection"] = "close"
    return response


def _read_headers(file: BinaryIO) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = _line(file.readline(MAX_LINE + 1))
        if not line:
            return headers
        name, colon, value = line.partition(":")
        if not colon:
            raise ValueError(f"a header line without a colon: {line[:80]!r}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    raise ValueError(f"more than {MAX_HEADERS} headers")


def _line(raw: bytes) -> str:
    if len(raw) > MAX_LINE:
        raise ValueError("a line of the answer's head is too long")
    if not raw.endswith(b"\n"):
        raise ValueError("the answer ended inside its head")
    return raw.decode("latin-1").rstrip("\r\n")


def _read_exactly(file: BinaryIO, size: int) -> bytes:
    data = file.read(size)
    if len(data) != size:
        raise ValueError(f"the answer ended after {len(data)} of {size} bytes")
    return data


def _read_chunked(file: BinaryIO) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = _line(file.readline(MAX_LINE + 1))
        size = int(size_line.split(";", 1)[0].strip(), 16)
        if size == 0:
            while _line(file.readline(MAX_LINE + 1)):  # trailers, up to the blank line
                pass
            return b"".join(parts)
        parts.append(_read_exactly(file, size))
        _read_exactly(file, 2)  # the CRLF after the chunk
