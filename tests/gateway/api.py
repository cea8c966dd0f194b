"""Helpers for tests that speak to the gateway over HTTP as a client would."""

from __future__ import annotations

from typing import Any

import httpx

PASSWORD = "correct horse"  # tests.support.create_user's default


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def rpc(http: httpx.Client, fn: str, token: str | None = None, **args: Any) -> httpx.Response:
    return http.post(f"/rpc/{fn}", json=args, headers=bearer(token) if token else {})


def error(answer: httpx.Response) -> dict[str, Any]:
    """PostgREST's error body: exactly code, message, details and hint."""
    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    body = answer.json()
    assert set(body) == {"code", "message", "details", "hint"}, body
    return body


def new_session(http: httpx.Client, token: str, name: str = "s") -> str:
    answer = rpc(http, "create_session", token, p_name=name)
    assert answer.status_code == 200, answer.text
    return str(answer.json())
