"""A small client for the HTTP API (`/rpc/<function>`, PostgREST's protocol),
served by PostgREST or `pg-shell serve`. Error bodies become ApiError."""

from __future__ import annotations

from typing import Any, Self

import httpx

from executor.errors import ApiError, ApiUnavailable

# Beyond a long poll's own wait, how long an answer may take to arrive.
_SLACK_S = 15.0


class ApiClient:
    """Calls shell_api functions as the holder of ``token`` (anonymous without one)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, function: str, args: dict[str, Any] | None = None, *, wait: int | None = None) -> Any:
        """POSTs named arguments to /rpc/``function``; returns the decoded JSON.
        ``wait`` asks the server to hold an empty answer up to that many
        seconds (``Prefer: wait=N``) until something changes."""
        headers = {"Prefer": f"wait={wait}"} if wait else {}
        timeout = (httpx.Timeout(self._http.timeout.connect, read=wait + _SLACK_S) if wait
                   else httpx.USE_CLIENT_DEFAULT)
        try:
            response = self._http.post(f"/rpc/{function}", json=args or {}, headers=headers,
                                       timeout=timeout)
        except httpx.TransportError as exc:
            raise ApiUnavailable(f"cannot reach the pg_shell API at {self.url}: {exc or type(exc).__name__}",
                                 hint="Is `pg-shell serve` (or PostgREST) running? PG_SHELL_URL says "
                                      "where it is.") from exc
        if response.is_success:
            return _json(response)
        raise _error(response)

    # The API, one method per shell_api function the CLI uses.

    def login(self, username: str, password: str) -> str:
        return str(self.call("login", {"p_username": username, "p_password": password})["token"])

    def create_session(self, name: str | None = None) -> str:
        return str(self.call("create_session", {"p_name": name} if name is not None else {}))

    def list_sessions(self) -> list[dict[str, Any]]:
        return list(self.call("list_sessions"))

    def submit_command(self, session_id: str, command: str) -> int:
        return int(self.call("submit_command", {"p_session_id": session_id, "p_command": command}))

    def latest_output(self, session_id: str, since_id: int = 0, limit: int = 20) -> list[dict[str, Any]]:
        return list(self.call("latest_output",
                              {"p_session_id": session_id, "p_since_id": since_id, "p_limit": limit}))

    def session_changes(self, session_id: str, after: int = 0, limit: int = 100,
                        wait: int | None = None) -> list[dict[str, Any]]:
        return list(self.call("session_changes",
                              {"p_session_id": session_id, "p_after_change": after, "p_limit": limit},
                              wait=wait))

    def cancel_command(self, command_id: int) -> bool:
        return bool(self.call("cancel_command", {"p_command_id": command_id}))

    def fork_session(self, command_id: int) -> str:
        return str(self.call("fork_session", {"p_source_command_id": command_id}))

    def replay_session(self, session_id: str, start_id: int) -> str:
        return str(self.call("replay_session", {"p_session_id": session_id, "p_start_id": start_id}))

    def replay_comparison(self, run_id: str) -> list[dict[str, Any]]:
        return list(self.call("replay_comparison", {"p_run_id": run_id}))

    def output_timeline(self, command_id: int) -> list[dict[str, Any]]:
        return list(self.call("output_timeline", {"p_command_id": command_id}))

    def change_cursor(self, session_id: str) -> int:
        """The session's latest change_seq: session_changes after it returns
        only changes made from now on."""
        return int(self.call("session_cursor", {"p_session_id": session_id}))


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise ApiUnavailable(f"the API answered {response.status_code} with a body that is not JSON",
                             status=response.status_code) from exc


def _error(response: httpx.Response) -> ApiError:
    """The error body ({code, message, details, hint}) as an ApiError."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or not body.get("message"):
        reason = response.reason_phrase or "error"
        return ApiError(f"the API answered HTTP {response.status_code} {reason}", status=response.status_code)
    return ApiError(str(body["message"]), code=_text(body.get("code")), status=response.status_code,
                    details=_text(body.get("details")), hint=_text(body.get("hint")))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
