"""The CLI's HTTP/1.1 connection (executor/http_connection.py) against a real
server on a loopback socket: requests share one kept-alive connection,
pipelined requests are answered in order in one round trip, chunked and
length-delimited bodies are read whole, an idle connection the server
closed is replaced before a request is written on it (and no request is
ever sent twice), a request interrupted half-way leaves no answer behind
for the next one, and an https URL gets TLS with the certificate checked."""

from __future__ import annotations

import os
import select
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from executor.http_connection import Connection, TransportError
from tests.fixtures_stack import REPO

Handler = Callable[[socket.socket, bytes], bool]  # (client, request) -> keep the connection?


class Server:
    """A loopback HTTP server that counts connections and requests and
    answers each request with ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.requests: list[bytes] = []
        self.read_ahead = 0  # bytes of later requests already read when one is answered
        self.hung_up = threading.Event()  # it closed a connection
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._talk, args=(client,), daemon=True).start()

    def _talk(self, client: socket.socket) -> None:
        try:
            self._answer(client)
        finally:
            client.close()
            self.hung_up.set()

    def _answer(self, client: socket.socket) -> None:
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                data = client.recv(65536)
                if not data:
                    return
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(buffer) < length:
                buffer += client.recv(65536)
            request, buffer = head + b"\r\n\r\n" + buffer[:length], buffer[length:]
            self.requests.append(request)
            self.read_ahead = len(buffer)
            if not self.handler(client, request):
                return

    def close(self) -> None:
        self.listener.close()


def answer(body: bytes, extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def echo_path(client: socket.socket, request: bytes) -> bool:
    client.sendall(answer(request.split(b" ")[1]))
    return True


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Server]]:
    servers: list[Server] = []

    def start(handler: Handler) -> Server:
        servers.append(Server(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_requests_share_one_kept_alive_connection(serve: Callable[[Handler], Server]) -> None:
    server = serve(echo_path)
    conn = Connection(server.url + "/api/")
    answers = [conn.request("POST", f"/rpc/f{n}", b'{"a": 1}').content for n in range(3)]
    assert answers == [b"/api/rpc/f0", b"/api/rpc/f1", b"/api/rpc/f2"]
    assert server.connections == 1
    assert server.requests[0].endswith(b'\r\n\r\n{"a": 1}')
    assert f"Host: {server.url.removeprefix('http://')}".encode() in server.requests[0]
    conn.close()


def test_pipelined_requests_are_sent_at_once_and_answered_in_order(
        serve: Callable[[Handler], Server]) -> None:
    unanswered: list[bool] = []

    def handler(client: socket.socket, request: bytes) -> bool:
        if b" /one " in request:
            # Is the second request already on its way, the first still unanswered?
            unanswered.append(server.read_ahead > 0 or bool(select.select([client], [], [], 10)[0]))
        return echo_path(client, request)

    server = serve(handler)
    conn = Connection(server.url)
    first, second = conn.pipeline([("POST", "/one", b"1", {}), ("POST", "/two", b"22", {})])
    assert (first.content, second.content) == (b"/one", b"/two")
    assert unanswered == [True]  # one round trip for both
    assert server.connections == 1 and len(server.requests) == 2
    conn.close()


def test_chunked_and_length_delimited_bodies_are_read_whole(
        serve: Callable[[Handler], Server]) -> None:
    def handler(client: socket.socket, request: bytes) -> bool:
        if b" /chunked " in request:
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n"
                           b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                           b"Content-Type: application/json\r\n\r\n"
                           b"4;ext=1\r\n[1, \r\n3\r\n2, \r\n2\r\n3]\r\n0\r\nX-Trailer: y\r\n\r\n")
        else:
            client.sendall(answer(b'{"x": "\xc3\xa9"}', "X-Twice: a\r\nX-Twice: b\r\n"))
        return True

    server = serve(handler)
    conn = Connection(server.url)
    chunked = conn.request("POST", "/chunked")
    assert (chunked.status_code, chunked.json()) == (200, [1, 2, 3])
    assert chunked.headers["content-type"] == "application/json"
    plain = conn.request("POST", "/plain")
    assert plain.json() == {"x": "é"} and plain.headers["x-twice"] == "a, b"
    assert server.connections == 1
    conn.close()


def test_an_idle_connection_the_server_closed_is_replaced_before_a_request(
        serve: Callable[[Handler], Server]) -> None:
    def handler(client: socket.socket, request: bytes) -> bool:
        client.sendall(answer(b"ok"))
        return False  # closes after each answer, without saying so

    server = serve(handler)
    conn = Connection(server.url)
    assert conn.request("POST", "/first").content == b"ok"
    assert server.hung_up.wait(10)
    assert conn.request("POST", "/second").content == b"ok"  # on a new connection
    assert [r.split(b" ")[1] for r in server.requests] == [b"/first", b"/second"]
    assert server.connections == 2
    conn.close()


def test_a_request_the_server_closed_on_is_never_sent_again(
        serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda client, request: False)  # reads the request, answers nothing
    conn = Connection(server.url)
    with pytest.raises(TransportError, match="closed the connection after 0 of 1 answers"):
        conn.request("POST", "/rpc/submit_command", b"{}")
    assert len(server.requests) == 1


def test_an_interrupted_request_leaves_no_answer_for_the_next(
        serve: Callable[[Handler], Server]) -> None:
    release = threading.Event()

    def handler(client: socket.socket, request: bytes) -> bool:
        if b" /slow " in request:
            release.wait(30)  # a long-poll, answered after the client gave up on it
            client.sendall(answer(b"late"))
            return True
        return echo_path(client, request)

    server = serve(handler)
    conn = Connection(server.url)
    with pytest.raises(TransportError, match="timed out"):
        conn.request("POST", "/slow", timeout=0.2)
    release.set()
    assert conn.request("POST", "/cancel").content == b"/cancel"
    assert server.connections == 2
    conn.close()


def test_a_server_that_does_not_answer_http_is_a_transport_error(
        serve: Callable[[Handler], Server]) -> None:
    def handler(client: socket.socket, request: bytes) -> bool:
        client.sendall(b"SSH-2.0-OpenSSH\r\n")
        return True

    conn = Connection(serve(handler).url)
    with pytest.raises(TransportError, match="not an HTTP/1.x answer"):
        conn.request("POST", "/x")
    with pytest.raises(TransportError):
        Connection("http://127.0.0.1:9").request("POST", "/x")  # nothing listens on port 9


def test_an_https_url_is_spoken_over_tls_and_the_certificate_is_checked(
        tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    listener = context.wrap_socket(socket.create_server(("127.0.0.1", 0)), server_side=True)
    port = listener.getsockname()[1]

    def serve() -> None:
        for _ in range(2):  # the trusting client, then the one that refuses the certificate
            try:
                client, _ = listener.accept()
            except (OSError, ssl.SSLError):
                continue
            with client:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += client.recv(65536)
                client.sendall(answer(request.split(b" ")[1]))

    threading.Thread(target=serve, daemon=True).start()
    probe = ("import sys; from executor.http_connection import Connection, TransportError\n"
             f"conn = Connection('https://localhost:{port}/api')\n"
             "try: print(conn.request('POST', '/rpc/f').content.decode())\n"
             "except TransportError as exc: print('refused:', exc)\n")
    trusted = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             cwd=REPO, env={**os.environ, "SSL_CERT_FILE": str(cert)})
    assert trusted.stdout == "/api/rpc/f\n", trusted.stderr
    unknown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             cwd=REPO, env={k: v for k, v in os.environ.items()
                                            if k != "SSL_CERT_FILE"})
    assert unknown.stdout.startswith("refused: [SSL: CERTIFICATE_VERIFY_FAILED]"), unknown.stderr
    listener.close()
