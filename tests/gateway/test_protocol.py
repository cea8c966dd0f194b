"""The gateway speaks PostgREST's protocol: the real `pg-shell serve` as a
subprocess (logged in as shell_authenticator) against a fresh database,
driven over HTTP. Status codes and error bodies, role switching, HTML
answers, form bodies, JWT attacks, security headers and long-polling."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import jwt
import pytest
from jwt.utils import base64url_encode

from executor.db import admin as db_admin
from executor.db.database import one_off
from tests.gateway.api import PASSWORD, bearer, error, new_session, rpc
from tests.support import connect_as, create_user


@pytest.fixture
def secret(db: str) -> str:
    with one_off(db, "test") as superuser:
        return db_admin.jwt_secret(superuser)


# -- PostgREST's status mapping -----------------------------------------------------


def test_an_unknown_function_is_404_pgrst202(http, token):
    answer = rpc(http, "no_such_function", token)
    assert answer.status_code == 404
    body = error(answer)
    assert body["code"] == "PGRST202"
    assert "shell_api.no_such_function" in body["message"]


def test_an_unknown_or_missing_argument_is_404(http, token):
    unknown = rpc(http, "create_session", token, p_nmae="typo")
    assert unknown.status_code == 404
    assert error(unknown)["code"] == "PGRST202"
    assert "p_nmae" in error(unknown)["message"]
    missing = rpc(http, "submit_command", token, p_command="echo hi")  # p_session_id is required
    assert missing.status_code == 404
    assert error(missing)["code"] == "PGRST202"


def test_get_on_a_volatile_function_is_405_and_on_a_stable_one_works(http, token):
    login = http.get("/rpc/login", params={"p_username": "alice", "p_password": PASSWORD})
    assert login.status_code == 405
    assert error(login)["code"] == "PGRST101"
    create = http.get("/rpc/create_session", headers=bearer(token))
    assert create.status_code == 405
    assert rpc(http, "list_sessions", token).json() == []  # nothing was created by the GET
    listed = http.get("/rpc/list_sessions", headers=bearer(token))
    assert listed.status_code == 200
    assert listed.json() == []


def test_a_body_that_is_not_json_is_400(http, token):
    answer = http.post("/rpc/create_session", content=b"{not json",
                       headers={**bearer(token), "Content-Type": "application/json"})
    assert answer.status_code == 400
    assert error(answer)["code"] == "PGRST102"
    array = http.post("/rpc/create_session", json=["p_name"], headers=bearer(token))
    assert array.status_code == 400
    assert error(array)["code"] == "PGRST102"


def test_22023_is_400_with_message_and_hint(http, token):
    session = new_session(http, token)
    answer = rpc(http, "submit_command", token, p_session_id=session, p_command="   ")
    assert answer.status_code == 400
    assert error(answer) == {"code": "22023", "message": "command is empty", "details": None,
                             "hint": "Type a command to run."}
    unknown = rpc(http, "submit_command", token,
                  p_session_id="00000000-0000-0000-0000-000000000000", p_command="echo hi")
    assert unknown.status_code == 400
    assert error(unknown)["message"] == "session not found"


def test_pt413_sets_the_status_413(http, token):
    session = new_session(http, token)
    answer = rpc(http, "submit_command", token, p_session_id=session,
                 p_command="x" * (1024 * 1024 + 1))
    assert answer.status_code == 413
    body = error(answer)
    assert body["code"] == "PT413"
    assert body["details"] == "A command may be at most 1048576 bytes."


def test_pt429_sets_the_status_429_when_a_quota_is_reached(http, token, db):
    admin = connect_as(db, "shell_admin")
    try:
        admin.cursor().execute("SELECT shell.set_user_quota('alice', p_max_sessions => 1)")
    finally:
        admin.close()
    new_session(http, token)
    answer = rpc(http, "create_session", token)
    assert answer.status_code == 429
    body = error(answer)
    assert body["code"] == "PT429"
    assert body["message"] == "session quota reached (1 sessions)"
    assert body["hint"] == (
        "Archive sessions you no longer need, or ask an administrator to raise max_sessions.")


def test_a_wrong_password_is_403_28p01(http, alice):
    answer = rpc(http, "login", p_username="alice", p_password="wrong horse")
    assert answer.status_code == 403
    assert error(answer)["code"] == "28P01"
    nobody = rpc(http, "login", p_username="nobody", p_password=PASSWORD)
    assert (nobody.status_code, error(nobody)) == (403, error(answer))  # usernames cannot be probed


def test_42501_is_401_without_a_token_and_403_with_one(http, token):
    anonymous = rpc(http, "create_session")
    assert anonymous.status_code == 401
    assert error(anonymous)["code"] == "42501"
    # A tenant may not call login (granted to shell_anon only): the database
    # refuses with 42501, and with a token that is 403, as PostgREST says.
    signed_in = rpc(http, "login", token, p_username="alice", p_password=PASSWORD)
    assert signed_in.status_code == 403
    assert error(signed_in)["code"] == "42501"


# -- roles --------------------------------------------------------------------------


def test_without_a_token_only_login_works(http, alice):
    assert rpc(http, "login", p_username="alice", p_password=PASSWORD).status_code == 200
    for fn, args in [("list_sessions", {}), ("create_session", {}),
                     ("latest_output", {"p_session_id": "00000000-0000-0000-0000-000000000000"}),
                     ("cancel_command", {"p_command_id": 1})]:
        answer = rpc(http, fn, **args)
        assert answer.status_code == 401, (fn, answer.text)
        assert error(answer)["code"] == "42501"


def test_a_tenant_token_reaches_the_api_as_that_tenant(http, token, db):
    session = new_session(http, token)
    command = rpc(http, "submit_command", token, p_session_id=session, p_command="echo hi")
    assert command.status_code == 200
    listed = rpc(http, "list_sessions", token).json()
    assert [s["id"] for s in listed] == [session]
    create_user(db, "bob")
    bob = rpc(http, "login", p_username="bob", p_password=PASSWORD).json()["token"]
    assert rpc(http, "list_sessions", bob).json() == []
    other = rpc(http, "latest_output", bob, p_session_id=session)
    assert other.status_code == 400
    assert error(other)["message"] == "session not found"


# -- representations ---------------------------------------------------------------


def test_html_functions_answer_raw_html_when_asked_and_a_json_string_otherwise(http, token):
    session = new_session(http, token)
    rpc(http, "submit_command", token, p_session_id=session, p_command="echo '<b>'")
    html = http.post("/rpc/latest_output_html", json={"p_session_id": session},
                     headers={**bearer(token), "Accept": "text/html"})
    assert html.status_code == 200
    assert html.headers["content-type"].startswith("text/html")
    assert html.text.startswith("<article class=\"cmd\"")
    assert "echo &#39;&lt;b&gt;&#39;" in html.text
    as_json = rpc(http, "latest_output_html", token, p_session_id=session)
    assert as_json.headers["content-type"].startswith("application/json")
    assert as_json.json() == html.text
    # A JSON function stays JSON even when HTML is accepted.
    listed = http.post("/rpc/list_sessions", headers={**bearer(token), "Accept": "text/html"})
    assert listed.headers["content-type"].startswith("application/json")


EVERY_BYTE = bytes(range(256))  # NUL and bytes that are not UTF-8 among them


def test_bytea_goes_in_as_postgresql_text_and_comes_out_raw_when_asked_and_as_hex_json_otherwise(
        http, token):
    session = new_session(http, token)
    upload = rpc(http, "upload_file", token, p_session_id=session, p_path="bin/every",
                 p_content="\\x" + EVERY_BYTE.hex())
    assert upload.status_code == 200, upload.text
    assert isinstance(upload.json(), int)
    args = {"p_session_id": session, "p_path": "bin/every"}
    raw = http.post("/rpc/read_file", json=args,
                    headers={**bearer(token), "Accept": "application/octet-stream"})
    assert (raw.status_code, raw.headers["content-type"], raw.content) == (
        200, "application/octet-stream", EVERY_BYTE)
    as_json = rpc(http, "read_file", token, **args)
    assert as_json.headers["content-type"].startswith("application/json")
    assert as_json.json() == "\\x" + EVERY_BYTE.hex()
    # read_file is stable: GET with query parameters serves the same bytes.
    got = http.get("/rpc/read_file", params=args,
                   headers={**bearer(token), "Accept": "application/octet-stream"})
    assert (got.status_code, got.content) == (200, EVERY_BYTE)
    # PostgreSQL's escape format is bytea input too, in a form body as in JSON.
    form = http.post("/rpc/upload_file",
                     data={"p_session_id": session, "p_path": "escaped", "p_content": "a\\000b"},
                     headers=bearer(token))
    assert form.status_code == 200, form.text
    assert rpc(http, "read_file", token, p_session_id=session,
               p_path="escaped").json() == "\\x610062"
    listed = rpc(http, "session_files", token, p_session_id=session).json()
    assert [(f["path"], f["kind"], f["size"]) for f in listed] == [
        ("bin", "dir", 256), ("bin/every", "file", 256), ("escaped", "file", 3)]


def test_raw_bytes_are_negotiated_by_the_accept_header_as_postgrest_does(http, token):
    session = new_session(http, token)
    rpc(http, "upload_file", token, p_session_id=session, p_path="f", p_content="\\x00ff")
    served = {}
    for accept in ["application/octet-stream", "application/octet-stream, application/json;q=0.5",
                   "application/json;q=0.5, application/octet-stream",
                   "application/json, application/octet-stream", "*/*",
                   "application/octet-stream;q=0, */*", "image/png"]:
        answer = http.post("/rpc/read_file", json={"p_session_id": session, "p_path": "f"},
                           headers={**bearer(token), "Accept": accept})
        assert answer.status_code == 200, answer.text
        served[accept] = answer.headers["content-type"].split(";")[0], answer.content
    raw, hex_json = ("application/octet-stream", b"\x00\xff"), ("application/json", b'"\\\\x00ff"')
    assert served == {
        "application/octet-stream": raw,
        "application/octet-stream, application/json;q=0.5": raw,
        "application/json;q=0.5, application/octet-stream": raw,
        "application/json, application/octet-stream": hex_json,  # equal q: the first listed wins
        "*/*": hex_json,
        "application/octet-stream;q=0, */*": hex_json,
        "image/png": hex_json,  # nothing offered: JSON (PostgREST would say 415)
    }
    # Errors stay JSON bodies, and a function that returns no bytea stays JSON.
    missing = http.post("/rpc/read_file", json={"p_session_id": session, "p_path": "nope"},
                        headers={**bearer(token), "Accept": "application/octet-stream"})
    assert missing.status_code == 400
    assert error(missing)["message"] == "no such file: nope"
    listed = http.post("/rpc/list_sessions",
                       headers={**bearer(token), "Accept": "application/octet-stream"})
    assert listed.headers["content-type"].startswith("application/json")
    assert [s["id"] for s in listed.json()] == [session]


def test_bytea_input_that_postgresql_cannot_read_is_400_with_its_message(http, token):
    session = new_session(http, token)
    answer = rpc(http, "upload_file", token, p_session_id=session, p_path="f", p_content="\\x0g")
    assert answer.status_code == 400
    body = error(answer)
    assert (body["code"], body["message"]) == ("22023", 'invalid hexadecimal digit: "g"')
    assert rpc(http, "session_files", token, p_session_id=session).json() == []


def test_form_encoded_bodies_are_named_arguments(http, alice):
    login = http.post("/rpc/login", data={"p_username": "alice", "p_password": PASSWORD})
    assert login.status_code == 200
    token = login.json()["token"]
    session = new_session(http, token)
    submitted = http.post("/rpc/submit_command_html",
                          data={"p_session_id": session, "p_command": "ls -l"},
                          headers={**bearer(token), "Accept": "text/html"})
    assert submitted.status_code == 200
    assert 'data-status="pending"' in submitted.text
    assert [r["command"] for r in rpc(http, "latest_output", token,
                                      p_session_id=session).json()] == ["ls -l"]


# -- JWT attacks: every one is refused before the database --------------------------


def claims_of(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


def test_a_forged_signature_is_401(http, token):
    header, payload, signature = token.split(".")
    flipped = signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")
    answer = http.post("/rpc/list_sessions", headers=bearer(f"{header}.{payload}.{flipped}"))
    assert answer.status_code == 401
    assert error(answer)["code"] == "PGRST301"
    # Someone else's subject under alice's signature.
    other = base64url_encode(json.dumps(
        {**claims_of(token), "sub": "00000000-0000-0000-0000-000000000001"}).encode()).decode()
    assert http.post("/rpc/list_sessions",
                     headers=bearer(f"{header}.{other}.{signature}")).status_code == 401


def test_an_expired_token_is_401(http, token, secret):
    expired = jwt.encode({**claims_of(token), "iat": int(time.time()) - 7200,
                          "exp": int(time.time()) - 3600},
                         secret, algorithm="HS256")
    answer = http.post("/rpc/list_sessions", headers=bearer(expired))
    assert answer.status_code == 401
    assert error(answer)["message"] == "JWT expired"


def test_alg_none_is_401(http, token):
    unsigned = jwt.encode(claims_of(token), None, algorithm="none")
    assert unsigned.endswith(".")
    answer = http.post("/rpc/list_sessions", headers=bearer(unsigned))
    assert answer.status_code == 401
    assert error(answer)["code"] == "PGRST301"


def test_a_token_signed_with_another_secret_is_401(http, token):
    other = jwt.encode(claims_of(token), "not the database's secret at all, 32+ bytes",
                       algorithm="HS256")
    assert http.post("/rpc/list_sessions", headers=bearer(other)).status_code == 401


def test_a_token_without_an_expiry_is_401(http, token, secret):
    claims = {k: v for k, v in claims_of(token).items() if k != "exp"}
    forever = jwt.encode(claims, secret, algorithm="HS256")
    assert http.post("/rpc/list_sessions", headers=bearer(forever)).status_code == 401


@pytest.mark.parametrize("role",
                         ["shell_admin", "postgres", "shell_executor", "shell_authenticator"])
def test_a_validly_signed_token_naming_a_privileged_role_is_401(http, token, secret, role):
    elevated = jwt.encode({**claims_of(token), "role": role}, secret, algorithm="HS256")
    answer = http.post("/rpc/list_sessions", headers=bearer(elevated))
    assert answer.status_code == 401
    assert role in error(answer)["message"]
    # Nor does it reach a function only that role may call.
    assert http.post("/rpc/login", headers=bearer(elevated),
                     json={"p_username": "alice", "p_password": PASSWORD}).status_code == 401


def test_a_token_for_a_user_who_does_not_exist_is_refused_by_the_database_with_403(http, token,
                                                                                   secret):
    # The signature is valid, so (as in PostgREST) the role is switched and
    # the database refuses the unknown subject: 42501 with a token is 403.
    ghost = jwt.encode({**claims_of(token), "sub": "00000000-0000-0000-0000-000000000001"}, secret,
                       algorithm="HS256")
    answer = http.post("/rpc/list_sessions", headers=bearer(ghost))
    assert answer.status_code == 403
    assert error(answer)["code"] == "42501"


@pytest.mark.parametrize("header",
                         ["Basic YWxpY2U6Y29ycmVjdCBob3JzZQ==", "Bearer", "Bearer not.a.jwt",
                          "Bearer \u00e9\u00e9", "token", "Bearer a.b"])
def test_garbage_in_the_authorization_header_is_401(http, alice, header):
    answer = http.post("/rpc/login", json={"p_username": "alice", "p_password": PASSWORD},
                       headers={"Authorization": header.encode()})
    assert answer.status_code == 401
    assert error(answer)["code"] == "PGRST301"


# -- headers ------------------------------------------------------------------------


def test_the_page_and_the_api_carry_the_csp_and_security_headers(http):
    page = http.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    api = http.post("/rpc/list_sessions")
    for answer in (page, api):
        csp = {d.split()[0]: d.split()[1:]
               for d in answer.headers["content-security-policy"].split("; ")}
        assert csp["default-src"] == ["'self'"]
        assert csp["script-src"] == ["'self'"]  # no inline scripts, no eval
        assert csp["style-src"] == ["'self'"]
        assert csp["frame-ancestors"] == ["'none'"]
        assert csp["object-src"] == ["'none'"]
        assert csp["base-uri"] == ["'none'"]
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "no-referrer"


# -- long-polling -------------------------------------------------------------------


def test_a_held_session_changes_request_returns_as_soon_as_a_command_is_submitted(http, gateway,
                                                                                  token):
    session = new_session(http, token)

    def submit_later() -> None:
        time.sleep(1)
        with httpx.Client(base_url=gateway.url, timeout=30) as other:
            rpc(other, "submit_command", token, p_session_id=session, p_command="echo woke")

    submitter = threading.Thread(target=submit_later)
    started = time.monotonic()
    submitter.start()
    answer = http.post("/rpc/session_changes", json={"p_session_id": session, "p_after_change": 0},
                       headers={**bearer(token), "Prefer": "wait=5"})
    elapsed = time.monotonic() - started
    submitter.join()
    assert answer.status_code == 200
    rows = answer.json()
    assert [(r["command"], r["status"]) for r in rows] == [("echo woke", "pending")]
    # Held until the change, released by it (not by the wait running out).
    assert 0.9 < elapsed < 4.5


def test_a_held_session_changes_request_returns_empty_after_the_wait(http, token):
    session = new_session(http, token)
    first = rpc(http, "submit_command", token, p_session_id=session, p_command="echo once")
    assert first.status_code == 200
    seen = rpc(http, "session_changes", token, p_session_id=session).json()
    cursor = max(r["change_seq"] for r in seen)
    started = time.monotonic()
    answer = http.post("/rpc/session_changes",
                       json={"p_session_id": session, "p_after_change": cursor},
                       headers={**bearer(token), "Prefer": "wait=2"})
    assert answer.status_code == 200
    assert answer.json() == []
    assert time.monotonic() - started >= 1.9
    # Without Prefer the same call answers at once.
    assert rpc(http, "session_changes", token, p_session_id=session,
               p_after_change=cursor).json() == []
