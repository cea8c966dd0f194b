"""A small client for the HTTP API (`/rpc/<function>`, PostgREST's protocol),
served by PostgREST or `pg-shell serve`, over one kept-alive connection
(http_connection.py). Error bodies become ApiError."""

from __future__ import annotations

import json
import re

from executor.errors import ApiError, ApiUnavailable
from executor.http_connection import Connection, Response, TransportError

TYPE_CHECKING = False  # `typing` is not needed at run time (see executor/cli/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Self

# Beyond a long poll's own wait, how long an answer may take to arrive.
_SLACK_S = 15.0
OCTET_STREAM = "application/octet-stream"
FILES_PAGE = 1000  # session_files rows per call (its most)


class ApiClient:
    """Calls shell_api functions as the holder of ``token`` (anonymous without one)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._token = token
        self._timeout = timeout
        self._http = Connection(self.url, timeout)

    def close(self) -> None:
        self._http.close()

    def another(self) -> ApiClient:
        """A client of the same user over a connection of its own: for calls
        made while this one waits on a long-poll (a terminal's keys)."""
        return ApiClient(self.url, self._token, self._timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, function: str, args: dict[str, Any] | None = None, *,
             wait: int | None = None) -> Any:
        """POSTs named arguments to /rpc/``function``; returns the decoded JSON.
        ``wait`` asks the server to hold an empty answer up to that many
        seconds (``Prefer: wait=N``) until something changes. Rows a server
        sent in pages (206, cut at its byte budget) are read to the end."""
        response = self._post(function, args, wait=wait)
        result = _json(response)
        while response.status_code == 206 and isinstance(result, list):
            span = re.fullmatch(r"(\d+)-(\d+)/(\d+|\*)", response.headers.get("content-range", ""))
            if span is None:
                break
            end = int(span.group(2)) + 1
            if span.group(3) != "*" and end >= int(span.group(3)):
                break
            response = self._post(function, args, query=f"?offset={end}")
            more = _json(response)
            if not more:
                break
            result += more
        return result

    def call_each(self, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
        """Several calls (function, named arguments) that do not depend on
        each other, sent at once and answered in order (one round trip);
        their decoded JSON. The first that failed raises its error, after
        the later ones ran (they were already sent)."""
        requests = [("POST", f"/rpc/{function}", json.dumps(args).encode(), self._headers)
                    for function, args in calls]
        try:
            responses = self._http.pipeline(requests)
        except TransportError as exc:
            raise self._unavailable(exc) from exc
        for response in responses:
            if not response.is_success:
                raise _error(response)
        return [_json(response) for response in responses]

    def call_bytes(self, function: str, args: dict[str, Any] | None = None) -> bytes:
        """Calls a function that returns bytea; returns its bytes. They are
        asked for raw (application/octet-stream), and taken from the JSON hex
        string when the server answers JSON instead (PostgREST 12 serves bytea
        raw only for a function whose return type is a media type domain)."""
        response = self._post(function, args,
                              {"Accept": f"{OCTET_STREAM}, application/json;q=0.5"})
        if response.headers.get("content-type", "").split(";")[0].strip() == OCTET_STREAM:
            return response.content
        return _bytea(_json(response))

    def _post(self, function: str, args: dict[str, Any] | None,
              headers: dict[str, str] | None = None, wait: int | None = None,
              query: str = "") -> Response:
        headers = {**self._headers, **(headers or {}),
                   **({"Prefer": f"wait={wait}"} if wait else {})}
        try:
            response = self._http.request("POST", f"/rpc/{function}{query}",
                                          json.dumps(args or {}).encode(), headers,
                                          timeout=wait + _SLACK_S if wait else None)
        except TransportError as exc:
            raise self._unavailable(exc) from exc
        if response.is_success:
            return response
        raise _error(response)

    def _unavailable(self, exc: TransportError) -> ApiUnavailable:
        reason = exc or type(exc).__name__
        return ApiUnavailable(f"cannot reach the pg_shell API at {self.url}: {reason}",
                              hint="Is `pg-shell serve` (or PostgREST) running? PG_SHELL_URL "
                                   "says where it is.")

    # The API, one method per shell_api function the CLI uses.

    def login(self, username: str, password: str) -> str:
        return str(self.call("login", {"p_username": username, "p_password": password})["token"])

    def create_session(self, name: str | None = None, template: str | None = None,
                       secrets: list[str] | None = None) -> str:
        """A new session's id; its commands get ``secrets`` (names) in their environment.
        Arguments not given are not sent, so a server from before secrets still takes it."""
        params = {"p_name": name, "p_template": template,
                  "p_secrets": secrets}
        return str(self.call("create_session", {k: v for k, v in params.items() if v is not None}))

    def list_templates(self) -> list[dict[str, Any]]:
        return list(self.call("list_templates"))

    def list_sessions(self) -> list[dict[str, Any]]:
        return list(self.call("list_sessions"))

    def submit_after_cursor(self, session_id: str, command: str, *,
                            window: tuple[int, int] | None = None,
                            stdin: str | None = None) -> tuple[int, int]:
        """The session's change cursor read just before ``command`` is
        submitted (so no change of the command falls before it), and the
        command's id: one round trip. With ``window`` (columns, rows) the
        command runs on a terminal of that size; ``stdin`` is all of its
        input. Neither is sent unless given, so a server from before
        terminals still takes a plain command."""
        args: dict[str, Any] = {"p_session_id": session_id, "p_command": command}
        if window is not None:
            args.update(p_tty=True, p_cols=window[0], p_rows=window[1])
        if stdin is not None:
            args["p_stdin"] = stdin
        cursor, command_id = self.call_each(
            ("session_cursor", {"p_session_id": session_id}), ("submit_command", args))
        return int(cursor), int(command_id)

    # Secrets: values a session's commands get in their environment; never read back.

    def set_secret(self, name: str, value: str) -> int:
        """Sets one of the caller's secrets (again: a new version); its version."""
        return int(self.call("set_secret", {"p_name": name, "p_value": value})["version"])

    def delete_secret(self, name: str) -> int:
        """Deletes one of the caller's secrets; the version deleted."""
        return int(self.call("delete_secret", {"p_name": name})["version"])

    def list_secrets(self) -> list[dict[str, Any]]:
        """name, version, updated_at of each of the caller's secrets (never a value)."""
        return list(self.call("list_secrets"))

    def set_session_secrets(self, session_id: str, names: list[str]) -> list[str]:
        """The secrets the session's commands get from its next one on (none for
        an empty list); the names kept, sorted."""
        return list(self.call("set_session_secrets",
                              {"p_session_id": session_id, "p_secrets": names}))

    # A command's input (a terminal's keys, or a pipe's data).

    def send_input(self, command_id: int, data: str) -> int:
        """Appends ``data`` (at most 64 KiB of UTF-8) to the command's input;
        its sequence number. RateLimited past the input rate."""
        return int(self.call("send_input", {"p_command_id": command_id, "p_data": data}))

    def close_input(self, command_id: int) -> None:
        self.call("close_input", {"p_command_id": command_id})

    def resize_terminal(self, command_id: int, cols: int, rows: int) -> None:
        self.call("resize_terminal", {"p_command_id": command_id, "p_cols": cols, "p_rows": rows})

    def command_input(self, command_id: int) -> list[dict[str, Any]]:
        """seq, offset_ms, data, redacted: what was typed into the command."""
        return list(self.call("command_input", {"p_command_id": command_id}))

    def command_status(self, command_id: int) -> str:
        """The command's status now (a page of one byte of its output)."""
        return str(self.call("read_output", {"p_command_id": command_id, "p_offset": 0,
                                             "p_limit": 1})[0]["status"])

    def find_command(self, session_id: str, command_id: int) -> dict[str, Any] | None:
        """The command's latest_output row (without its output) if it is one
        of the session's, else None."""
        rows = self.call("latest_output", {"p_session_id": session_id,
                                           "p_since_id": command_id - 1,
                                           "p_before_id": command_id + 1, "p_limit": 1,
                                           "p_output_limit": 0})
        return dict(rows[0]) if rows else None

    def latest_output(self, session_id: str, since_id: int = 0,
                      limit: int = 20) -> list[dict[str, Any]]:
        return list(self.call("latest_output", {"p_session_id": session_id,
                                                "p_since_id": since_id, "p_limit": limit}))

    def session_changes(self, session_id: str, after: int = 0, limit: int = 100,
                        wait: int | None = None, tail: bool = False) -> list[dict[str, Any]]:
        """Commands changed after the cursor ``after``; with ``tail``, each
        row's output is only what arrived after it (from output_offset)."""
        return list(self.call("session_changes",
                              {"p_session_id": session_id, "p_after_change": after,
                               "p_limit": limit, "p_tail": tail},
                              wait=wait))

    def read_output(self, command_id: int, offset: int = 0) -> dict[str, Any]:
        """One page of a command's output from byte ``offset``: output,
        next_offset, output_bytes."""
        return dict(self.call("read_output", {"p_command_id": command_id,
                                              "p_offset": offset})[0])

    def cancel_command(self, command_id: int) -> bool:
        return bool(self.call("cancel_command", {"p_command_id": command_id}))

    def fork_session(self, command_id: int) -> str:
        return str(self.call("fork_session", {"p_source_command_id": command_id}))

    def replay_session(self, session_id: str, start_id: int) -> str:
        return str(self.call("replay_session",
                             {"p_session_id": session_id, "p_start_id": start_id}))

    def replay_comparison(self, run_id: str) -> list[dict[str, Any]]:
        return list(self.call("replay_comparison", {"p_run_id": run_id}))

    def output_timeline(self, command_id: int) -> list[dict[str, Any]]:
        return list(self.call("output_timeline", {"p_command_id": command_id}))

    def change_cursor(self, session_id: str) -> int:
        """The session's latest change_seq: session_changes after it returns
        only changes made from now on."""
        return int(self.call("session_cursor", {"p_session_id": session_id}))

    # The workspace: a session's files (paths relative to its home).

    def session_files(self, session_id: str, command_id: int | None = None) -> list[dict[str, Any]]:
        """path, kind (file/dir/symlink), mode, size, sha256, target: the tree
        now, or right after ``command_id``; parents before their entries.
        Read a page at a time (each page's last path is the next one's cursor;
        a page the gateway's byte budget cut short is not the last)."""
        rows: list[dict[str, Any]] = []
        after = None
        while True:
            page = list(self.call("session_files", {
                "p_session_id": session_id, "p_command_id": command_id, "p_after": after,
                "p_limit": FILES_PAGE}))
            if not page:
                return rows
            rows += page
            after = page[-1]["path"]

    def read_file(self, session_id: str, path: str, command_id: int | None = None) -> bytes:
        return self.call_bytes("read_file", {"p_session_id": session_id, "p_path": path,
                                             "p_command_id": command_id})

    def command_changes(self, command_id: int) -> list[dict[str, Any]]:
        """path, change (added/modified/deleted), kind, size: what one command
        (or upload) changed in its session's files."""
        return list(self.call("command_changes", {"p_command_id": command_id}))

    def upload_file(self, session_id: str, path: str, content: bytes, mode: int = 0o644) -> int:
        """Puts ``content`` at ``path`` (replacing a file there); returns the
        id of the upload's entry in the session's history."""
        return int(self.call("upload_file", {"p_session_id": session_id, "p_path": path,
                                             "p_content": "\\x" + content.hex(), "p_mode": mode}))


def _json(response: Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise ApiUnavailable(f"the API answered {response.status_code} with a body that is not "
                             "JSON", status=response.status_code) from exc


def _bytea(value: Any) -> bytes:
    """bytea in JSON: PostgreSQL's hex format (\\x…), the default bytea_output."""
    if isinstance(value, str) and value.startswith("\\x"):
        try:
            return bytes.fromhex(value[2:])
        except ValueError:
            pass
    raise ApiUnavailable("the API answered with a value that is not bytea in hex format")


class RateLimited(ApiError):
    """429: too many requests; ``retry_after`` is how many seconds to wait
    before the same request may succeed."""

    def __init__(self, message: str, retry_after: float, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.retry_after = retry_after


def _retry_after(response: Response, hint: str | None) -> float:
    """Retry-After's seconds; else the "Try again in N seconds" a function
    raising PT429 gives as its hint (no header comes with those); else 1."""
    for text, pattern in ((response.headers.get("retry-after", ""), r"\s*(\d+)\s*"),
                          (hint or "", r".*?[Tt]ry again in (\d+) second.*")):
        found = re.fullmatch(pattern, text, re.DOTALL)
        if found:
            return max(1.0, float(found.group(1)))
    return 1.0


def _error(response: Response) -> ApiError:
    """The error body ({code, message, details, hint}) as an ApiError."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or not body.get("message"):
        reason = response.reason_phrase or "error"
        message = f"the API answered HTTP {response.status_code} {reason}"
        if response.status_code == 429:
            return RateLimited(message, _retry_after(response, None), status=429)
        return ApiError(message, status=response.status_code)
    fields: dict[str, Any] = {
        "code": _text(body.get("code")), "status": response.status_code,
        "details": _text(body.get("details")), "hint": _text(body.get("hint"))}
    if response.status_code == 429:
        return RateLimited(str(body["message"]), _retry_after(response, fields["hint"]), **fields)
    return ApiError(str(body["message"]), **fields)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
