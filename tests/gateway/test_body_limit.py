"""Request bodies past PG_SHELL_MAX_BODY_BYTES are refused with 413 before
they are read, whether announced by Content-Length or streamed chunked; only
upload_file with a valid token gets the larger upload limit. Attacked on the
real gateway, with its memory read from /proc."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures_stack import Gateway
from tests.gateway.api import bearer, new_session, rpc
from tests.gateway.raw_http import post_huge, rss_bytes, status_of

pytestmark = pytest.mark.postgres

MiB = 1024 * 1024
# Growth of the gateway's peak resident memory allowed while it refuses 64 MiB:
# a few MB of allocator noise, far from the body's size.
RSS_SLACK = 8 * MiB


def error_of(answer: bytes) -> dict[str, object]:
    body = answer.split(b"\r\n\r\n", 1)[1]
    return dict(json.loads(body))


def test_an_anonymous_64_mib_body_is_refused_from_content_length_without_growing_memory(
        gateway: Gateway, http: httpx.Client) -> None:
    assert gateway.proc is not None
    http.get("/rpc/login")  # the first request warms what every request uses
    before = rss_bytes(gateway.proc.pid, "VmHWM")
    answer, _sent = post_huge(gateway.port, "/rpc/login", 64 * MiB)
    grown = rss_bytes(gateway.proc.pid, "VmHWM") - before
    assert status_of(answer) == 413
    assert error_of(answer)["code"] == "PT413"
    assert error_of(answer)["message"] == "the request body is larger than 2097152 bytes"
    assert grown < RSS_SLACK, f"the gateway grew by {grown} bytes"


def test_a_chunked_body_is_cut_off_once_it_passes_the_limit(
        gateway: Gateway, http: httpx.Client) -> None:
    assert gateway.proc is not None
    http.get("/rpc/login")
    before = rss_bytes(gateway.proc.pid, "VmHWM")
    answer, _sent = post_huge(gateway.port, "/rpc/login", 64 * MiB, chunked=True)
    grown = rss_bytes(gateway.proc.pid, "VmHWM") - before
    assert status_of(answer) == 413
    assert error_of(answer)["code"] == "PT413"
    assert grown < RSS_SLACK, f"the gateway grew by {grown} bytes"
    # The gateway still serves.
    assert http.post("/rpc/login", json={"p_username": "x", "p_password": "y"}).status_code == 403


def test_a_body_under_the_limit_is_served(http: httpx.Client, alice: str) -> None:
    answer = http.post("/rpc/login",
                       json={"p_username": "alice", "p_password": "x" * (MiB + 17)})
    assert answer.status_code == 403  # read whole, checked by the database


@pytest.fixture
def small_gateway(db: str, tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(db, tmp_path / "gateway.log").start(PG_SHELL_MAX_BODY_BYTES="65536",
                                                     PG_SHELL_MAX_UPLOAD_BYTES="1048576")
    yield gw
    gw.stop()


def test_only_upload_file_with_a_valid_token_gets_the_upload_limit(
        small_gateway: Gateway, alice: str) -> None:
    content = "\\x" + "61" * (200 * 1024)  # 200 KiB, hex-encoded as bytea travels in JSON
    with httpx.Client(base_url=small_gateway.url, timeout=30) as http:
        token = http.post("/rpc/login", json={"p_username": "alice",
                                              "p_password": "correct horse"}).json()["token"]
        session = new_session(http, token)
        upload = {"p_session_id": session, "p_path": "a.txt", "p_content": content}
        assert rpc(http, "upload_file", token, **upload).status_code == 200
        anonymous = rpc(http, "upload_file", **upload)
        assert (anonymous.status_code, anonymous.json()["code"]) == (413, "PT413")
        forged = http.post("/rpc/upload_file", json=upload, headers=bearer(token[:-4] + "AAAA"))
        assert forged.status_code == 413
        elsewhere = rpc(http, "submit_command", token, p_session_id=session,
                        p_command="echo " + "a" * 70_000)
        assert elsewhere.status_code == 413
