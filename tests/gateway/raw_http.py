"""HTTP as an attacker writes it, on a bare socket: bodies larger than any
client library would send, requests left half sent, and a look at the
gateway's memory (VmRSS and its peak, VmHWM, of its process)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

CHUNK = 256 * 1024


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """The resident set of process ``pid`` (VmRSS in /proc/<pid>/status), or
    with ``field="VmHWM"`` its peak so far: a body read whole and freed again
    leaves VmRSS where it was, but not the peak."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for process {pid}")


def status_of(answer: bytes) -> int:
    """The status code of a raw HTTP answer."""
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


def read_answer(sock: socket.socket, timeout: float = 30) -> bytes:
    """Everything the server sends until it closes (or ``timeout``)."""
    sock.settimeout(timeout)
    parts = []
    try:
        while chunk := sock.recv(65536):
            parts.append(chunk)
    except (ConnectionResetError, TimeoutError):
        pass
    return b"".join(parts)


def post_huge(port: int, path: str, size: int, chunked: bool = False,
              headers: dict[str, str] | None = None) -> tuple[bytes, int]:
    """POSTs ``size`` bytes of a JSON-looking body, announced by Content-Length
    or sent chunked; stops sending when the server stops reading. The
    server's answer, and how many body bytes it took before that."""
    head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}",
            "Content-Type: application/json",
            "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}",
            *(f"{k}: {v}" for k, v in (headers or {}).items())]
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        block = b'{"p_username": "' + b"a" * (CHUNK - 16)
        try:
            while sent < size:
                piece = block[:min(CHUNK, size - sent)]
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                sent += len(piece)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed: what a limit should do
        return read_answer(sock), sent


def closed_within(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the server closes ``sock`` (reads to EOF, discarding any
    answer), or None if it is still open after ``timeout``."""
    start = time.monotonic()
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            if time.monotonic() - start > timeout:
                return None
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def trickled_until_closed(sock: socket.socket, piece: bytes, wait_s: float) -> float | None:
    """Sends ``piece`` about once a second (well inside any stall deadline);
    the seconds until the server closed the connection, or None after ``wait_s``."""
    start = time.monotonic()
    while time.monotonic() - start < wait_s:
        try:
            sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - start
        if closed_within(sock, 1) is not None:
            return time.monotonic() - start
    return None
