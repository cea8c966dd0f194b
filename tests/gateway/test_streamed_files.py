"""Files go through the gateway in parts: a 64 MiB upload or download grows
the gateway's peak resident memory (VmHWM, read from /proc) by a small part
of its size, where the whole body used to be held several times over; bytes
altered in the database are never served as a whole answer; a user's
requests in progress are capped. Attacked on the real gateway over HTTP."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.audit.conftest import cli
from tests.fixtures_stack import Gateway
from tests.gateway.api import PASSWORD, bearer, error, new_session, rpc
from tests.gateway.raw_http import rss_bytes
from tests.support import call, connect_as, create_user, one, tenant

pytestmark = pytest.mark.postgres

MiB = 1024 * 1024
PIECE = MiB


def content_of(size: int, seed: bytes) -> Iterator[bytes]:
    """``size`` bytes, made a MiB at a time (never held whole here either)."""
    block = hashlib.sha256(seed).digest() * (PIECE // 32)
    for start in range(0, size, PIECE):
        yield block[: min(PIECE, size - start)]


def digest_of(size: int, seed: bytes) -> str:
    digest = hashlib.sha256()
    for piece in content_of(size, seed):
        digest.update(piece)
    return digest.hexdigest()


def upload_body(session: str, path: str, size: int, seed: bytes) -> Iterator[bytes]:
    """upload_file's JSON body as a client sends it (p_content in bytea's hex format)."""
    yield json.dumps({"p_session_id": session, "p_path": path, "p_mode": 0o600})[:-1].encode()
    yield b', "p_content": "\\\\x'
    for piece in content_of(size, seed):
        yield piece.hex().encode()
    yield b'"}'


def peak_reset(pid: int) -> int:
    """Resets the process's peak resident memory to its current one; returns it."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return rss_bytes(pid, "VmHWM")


def login(http: httpx.Client, username: str) -> str:
    answer = http.post("/rpc/login", json={"p_username": username, "p_password": PASSWORD})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])


def test_a_64_mib_upload_grows_the_gateway_by_a_small_part_of_it(
        gateway: Gateway, http: httpx.Client, token: str) -> None:
    assert gateway.proc is not None
    size = 64 * MiB
    session = new_session(http, token)
    rpc(http, "list_sessions", token)  # the common path warmed
    before = peak_reset(gateway.proc.pid)
    answer = http.post("/rpc/upload_file", content=upload_body(session, "big.bin", size, b"a"),
                       headers={**bearer(token), "Content-Type": "application/json"},
                       timeout=300)
    grown = rss_bytes(gateway.proc.pid, "VmHWM") - before
    assert answer.status_code == 200, answer.text
    files = {f["path"]: f for f in rpc(http, "session_files", token,
                                       p_session_id=session).json()}
    assert (files["big.bin"]["size"], files["big.bin"]["sha256"], files["big.bin"]["mode"]) == (
        size, digest_of(size, b"a"), 0o600)
    # The body was 128 MiB of hex: held whole, it grew the gateway by several times that.
    assert grown < size // 4, f"the gateway grew by {grown} bytes for a {size}-byte file"


def test_a_refused_upload_leaves_no_parts_behind(
        gateway: Gateway, http: httpx.Client, token: str, db: str) -> None:
    session = new_session(http, token)
    answer = http.post("/rpc/upload_file",
                       content=upload_body(session, "../escape", 3 * MiB, b"b"),
                       headers={**bearer(token), "Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    admin = connect_as(db, "postgres")
    try:
        # The parts are dropped in the background once the call failed.
        for _ in range(200):
            if one(admin, "SELECT count(*) FROM shell.upload_parts") == 0:
                break
            threading.Event().wait(0.05)
        assert one(admin, "SELECT count(*) FROM shell.upload_parts") == 0
    finally:
        admin.close()


def test_an_upload_in_one_piece_or_in_json_escapes_reads_back_the_same(
        http: httpx.Client, token: str) -> None:
    session = new_session(http, token)
    data = bytes(range(256)) * 3
    escaped = "".join("\\\\" if b == 92 else chr(b) if 32 <= b < 127 else f"\\{b:03o}"
                      for b in data)
    for path, content in [("hex.bin", "\\x" + data.hex()), ("escape.bin", escaped),
                          ("empty.bin", "\\x")]:
        answer = http.post("/rpc/upload_file", headers=bearer(token),
                           content=json.dumps({"p_content": content, "p_path": path,
                                               "p_session_id": session}, ensure_ascii=True))
        assert answer.status_code == 200, answer.text
    for path, expected in [("hex.bin", data), ("escape.bin", data), ("empty.bin", b"")]:
        raw = http.post("/rpc/read_file", json={"p_session_id": session, "p_path": path},
                        headers={**bearer(token), "Accept": "application/octet-stream"})
        assert (raw.status_code, raw.content) == (200, expected)
        as_json = rpc(http, "read_file", token, p_session_id=session, p_path=path)
        assert as_json.json() == "\\x" + expected.hex()
    bad = http.post("/rpc/upload_file", headers=bearer(token),
                    content=json.dumps({"p_content": "\\x0g", "p_path": "x",
                                        "p_session_id": session}))
    assert bad.status_code == 400
    nul = http.post("/rpc/upload_file", headers=bearer(token),
                    content=json.dumps({"p_content": "a\u0000", "p_path": "x",
                                        "p_session_id": session}))
    assert (nul.status_code, error(nul)["code"]) == (400, "22P05")


def test_a_64_mib_download_is_streamed_and_grows_the_gateway_by_a_small_part_of_it(
        gateway: Gateway, http: httpx.Client, token: str, alice: str, db: str) -> None:
    assert gateway.proc is not None
    size = 64 * MiB
    session = new_session(http, token)
    put_file(db, alice, session, "big.bin", size, b"c")
    rpc(http, "list_sessions", token)
    for accept, decode in [("application/octet-stream", _raw), ("application/json", _json_hex)]:
        before = peak_reset(gateway.proc.pid)
        digest = hashlib.sha256()
        with http.stream("POST", "/rpc/read_file", json={"p_session_id": session,
                                                          "p_path": "big.bin"},
                         headers={**bearer(token), "Accept": accept}, timeout=300) as answer:
            assert answer.status_code == 200
            tail = b""
            for piece in answer.iter_bytes():
                whole, tail = decode(tail + piece)
                digest.update(whole)
        grown = rss_bytes(gateway.proc.pid, "VmHWM") - before
        assert digest.hexdigest() == digest_of(size, b"c")
        assert grown < size // 4, f"{accept}: the gateway grew by {grown} bytes"


def _raw(data: bytes) -> tuple[bytes, bytes]:
    return data, b""


def _json_hex(text: bytes) -> tuple[bytes, bytes]:
    """The bytes in a piece of "\\\\x…" JSON, and what waits for the next piece."""
    text = text.removeprefix(b'"\\\\x').removesuffix(b'"')
    even = len(text) - len(text) % 2
    return bytes.fromhex(text[:even].decode()), text[even:]


def put_file(db: str, user: str, session: str, path: str, size: int, seed: bytes) -> None:
    """A file put as a tenant through SQL, so the gateway takes no part in it."""
    conn = tenant(db, user)
    try:
        data = b"".join(content_of(size, seed))
        one(conn, "SELECT shell_api.upload_file(%s, %s, %s)", (session, path, data))
    finally:
        conn.close()


def test_altered_bytes_are_never_served_whole(
        http: httpx.Client, token: str, alice: str, db: str) -> None:
    session = new_session(http, token)
    size = 3 * MiB + 5
    put_file(db, alice, session, "f.bin", size, b"d")
    sha = digest_of(size, b"d")
    admin = connect_as(db, "postgres")
    try:
        call(admin, "UPDATE shell.blob_chunks SET data = overlay(data PLACING '\\x00ff'::bytea "
                    "FROM 1000) WHERE sha256 = %s AND seq = 0", (sha,))
    finally:
        admin.close()
    for accept in ("application/octet-stream", "application/json"):
        received = bytearray()
        try:
            with http.stream("POST", "/rpc/read_file",
                             json={"p_session_id": session, "p_path": "f.bin"},
                             headers={**bearer(token), "Accept": accept}) as answer:
                for piece in answer.iter_bytes():
                    received += piece
            complete = answer.status_code == 200
        except httpx.RemoteProtocolError:  # cut short: fewer bytes than Content-Length
            complete = False
        assert not complete, f"{accept}: {len(received)} altered bytes were served whole"
    # The whole-file function (what PostgREST serves) refuses them too.
    conn = tenant(db, alice)
    try:
        with pytest.raises(Exception, match="does not match its hash"):
            one(conn, "SELECT shell_api.read_file(%s, 'f.bin')", (session,))
    finally:
        conn.close()


@pytest.fixture
def capped_gateway(db: str, tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(db, tmp_path / "gateway.log").start(PG_SHELL_REQUESTS_PER_USER="3")
    yield gw
    gw.stop()


def test_a_user_beyond_her_requests_in_progress_gets_429_and_others_are_served(
        capped_gateway: Gateway, alice: str, db: str) -> None:
    """Three downloads whose client reads nothing stay in progress (the
    gateway waits to send the rest); a fourth request of the same user is
    refused at once, another user's is served, and once they end hers are too."""
    create_user(db, "bob")
    with httpx.Client(base_url=capped_gateway.url, timeout=60) as http:
        token, other = login(http, "alice"), login(http, "bob")
        session = new_session(http, token)
        put_file(db, alice, session, "f.bin", 32 * MiB, b"e")
        with contextlib.ExitStack() as held:
            for _ in range(3):
                answer = held.enter_context(http.stream(
                    "POST", "/rpc/read_file", json={"p_session_id": session, "p_path": "f.bin"},
                    headers={**bearer(token), "Accept": "application/octet-stream"}))
                assert answer.status_code == 200
            refused = rpc(http, "list_sessions", token)
            assert (refused.status_code, refused.headers.get("retry-after")) == (429, "1")
            assert error(refused) == {"code": "PT429",
                                      "message": "too many requests of this user at once",
                                      "details": None, "hint": "Try again in 1 second."}
            assert rpc(http, "list_sessions", other).status_code == 200
        # Closed by the client: the gateway counts them out as their sending fails.
        served = None
        for _ in range(600):
            served = rpc(http, "list_sessions", token)
            if served.status_code == 200:
                break
            threading.Event().wait(0.05)
        assert served is not None and served.status_code == 200


def test_a_singular_object_stops_reading_after_two_rows(
        gateway: Gateway, http: httpx.Client, token: str, alice: str, db: str) -> None:
    """One object asked of 4,000 rows of 16 KiB: PostgREST's 406 with the
    number of rows, without the gateway reading them all."""
    assert gateway.proc is not None
    rows, cwd = 4000, 16 * 1024
    admin = connect_as(db, "postgres")
    try:
        call(admin, "INSERT INTO shell.sessions (user_id, name, cwd) SELECT %s, 's' || i, "
                    "'/' || repeat(md5(i::text), %s) FROM generate_series(1, %s) i",
             (alice, cwd // 32, rows))
    finally:
        admin.close()
    rpc(http, "session_cursor", token, p_session_id="00000000-0000-0000-0000-000000000000")
    before = peak_reset(gateway.proc.pid)
    answer = http.get("/rpc/list_sessions", headers={
        **bearer(token), "Accept": "application/vnd.pgrst.object+json"})
    grown = rss_bytes(gateway.proc.pid, "VmHWM") - before
    assert answer.status_code == 406
    assert error(answer) == {
        "code": "PGRST116", "message": "JSON object requested, multiple (or no) rows returned",
        "details": f"The result contains {rows} rows", "hint": None}
    assert grown < rows * cwd // 4, f"the gateway grew by {grown} bytes"


def test_parts_of_an_abandoned_upload_are_removed_by_cleanup(
        db: str, alice: str, tmp_path: Path) -> None:
    """A client that stages parts and never finishes (upload_part is public,
    PostgREST's clients call it) leaves nothing for good: after
    upload_stale_after_s, `pg-shell cleanup` removes them; a fresh upload stays."""
    me = tenant(db, alice)
    try:
        for upload in ("11111111-1111-1111-1111-111111111111",
                       "22222222-2222-2222-2222-222222222222"):
            one(me, "SELECT shell_api.upload_part(%s, 0, %s)", (upload, b"x" * 1000))
    finally:
        me.close()
    admin = connect_as(db, "postgres")
    try:
        call(admin, "UPDATE shell.upload_parts SET created_at = now() - interval '2 hours' "
                    "WHERE upload_id = '11111111-1111-1111-1111-111111111111'")
        done = cli(db, "cleanup", "--once", "--no-volumes",
                   env={"PG_SHELL_SIGNING_KEY_FILE": str(tmp_path / "cleanup-key")})
        assert done.returncode == 0, done.stderr
        assert "1 parts of abandoned uploads" in done.stderr
        assert [r["upload_id"] for r in call(admin, "SELECT upload_id::text FROM "
                                                    "shell.upload_parts")] == [
            "22222222-2222-2222-2222-222222222222"]
    finally:
        admin.close()
