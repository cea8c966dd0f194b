"""Stored files over HTTP (0022), attacked as a tenant would on the real
gateway: uploading one path again and again stops at the files quota (each
version the history keeps counts), uploads past the per-minute limit get
429, and replay_session gets the same 429 as submit_command."""

from __future__ import annotations

import os

import httpx
import psycopg2
import pytest

from tests.gateway.api import error, new_session, rpc

pytestmark = pytest.mark.postgres

MiB = 1024 * 1024


def set_user(db: str, column: str, value: int) -> None:
    conn = psycopg2.connect(db)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"UPDATE shell.users SET {column} = %s WHERE username = 'alice'", (value,))
    finally:
        conn.close()


def upload(http: httpx.Client, token: str, session: str, path: str,
           content: bytes) -> httpx.Response:
    return rpc(http, "upload_file", token, p_session_id=session, p_path=path,
               p_content="\\x" + content.hex())


def test_uploading_one_path_again_and_again_stops_at_the_files_quota(
        http: httpx.Client, token: str, db: str) -> None:
    set_user(db, "max_file_bytes", 3 * MiB)
    session = new_session(http, token)
    answers = [upload(http, token, session, "same.bin", os.urandom(MiB)) for _ in range(10)]
    # Two versions and their roots' entries fit in 3 MiB, a third does not.
    assert [a.status_code for a in answers] == [200, 200] + [413] * 8
    refused = error(answers[2])
    assert refused["code"] == "PT413"
    assert refused["message"].startswith("files quota reached (")
    assert "Deleting files does not free it" in str(refused["hint"])


def test_uploads_past_the_limit_per_minute_get_429(
        http: httpx.Client, token: str, db: str) -> None:
    set_user(db, "max_uploads_per_minute", 2)
    session = new_session(http, token)
    statuses = [upload(http, token, session, f"f{i}", b"x").status_code for i in range(4)]
    assert statuses == [200, 200, 429, 429]


def test_replaying_gets_the_same_429_as_submitting(
        http: httpx.Client, token: str, db: str) -> None:
    session = new_session(http, token)
    first = rpc(http, "submit_command", token, p_session_id=session, p_command="echo hi")
    assert first.status_code == 200, first.text
    set_user(db, "max_output_bytes", 0)  # reached: no command of alice's may be queued
    submitted = rpc(http, "submit_command", token, p_session_id=session, p_command="echo hi")
    replayed = rpc(http, "replay_session", token, p_session_id=session, p_start_id=first.json())
    assert (submitted.status_code, error(submitted)["code"]) == (429, "PT429")
    assert (replayed.status_code, error(replayed)["code"]) == (429, "PT429")
    assert error(replayed)["message"] == error(submitted)["message"]
