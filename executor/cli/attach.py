"""`pg-shell attach COMMAND_ID`: join a terminal command that is running
(started by `pg-shell run -t` elsewhere, or left by one that was detached):
its output so far, then live, with keys and window size forwarded."""

from __future__ import annotations

import os

from executor.cli.follow import TERMINAL, ending
from executor.cli.interactive import STDIN, interact, local_window
from executor.errors import ApiError, PgShellError

TYPE_CHECKING = False  # `typing` is not needed at run time (see executor/cli/__init__.py)
if TYPE_CHECKING:
    from typing import Any

    from executor.api_client import ApiClient


def attach(client: ApiClient, command_id: int, preferred: str | None) -> int:
    """Joins ``command_id``; its exit status, as `run -t`'s."""
    session_id, row = _locate(client, command_id, preferred)
    if row["status"] in TERMINAL:
        raise PgShellError(_ended(session_id, command_id, row))
    if os.isatty(STDIN):
        # The window follows whoever attached last (as tmux's does); this
        # also tells whether the command has a terminal at all.
        try:
            client.resize_terminal(command_id, *local_window())
        except ApiError as exc:
            if exc.code != "PT409":
                raise
            return _refused(client, session_id, command_id)
    # The cursor first: a change after it is followed, whatever the snapshot missed.
    cursor = client.change_cursor(session_id)
    now = client.find_command(session_id, command_id) or row
    return interact(client, command_id, session_id, cursor, shown=[now])


def _locate(client: ApiClient, command_id: int,
            preferred: str | None) -> tuple[str, dict[str, Any]]:
    """The session holding ``command_id`` and its row: the preferred session
    (--session, PG_SHELL_SESSION) first, then the others, most recently
    active first (the API names no command's session)."""
    if command_id < 1:
        raise PgShellError(f"no command {command_id}: command ids start at 1")
    sessions = [preferred] if preferred else []
    sessions += [str(s["id"]) for s in client.list_sessions() if str(s["id"]) != preferred]
    for session_id in sessions:
        row = client.find_command(session_id, command_id)
        if row is not None:
            return session_id, row
    raise PgShellError(f"command {command_id} is not in any of your sessions")


def _refused(client: ApiClient, session_id: str, command_id: int) -> int:
    """Why a command refused a window size (PT409): it ended, or it has no terminal."""
    row = client.find_command(session_id, command_id)
    if row is not None and row["status"] in TERMINAL:
        raise PgShellError(_ended(session_id, command_id, row))
    raise PgShellError(f"command {command_id} has no terminal: attach joins commands started "
                       f"with `pg-shell run -t`; `pg-shell tail -f` follows any command")


def _ended(session_id: str, command_id: int, row: dict[str, Any]) -> str:
    return (f"command {command_id} has ended ({ending(row)}): nothing to attach to; "
            f"`pg-shell history -s {session_id} --json` shows its output")
