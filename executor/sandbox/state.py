"""Validate the cwd and environment a container reports after a command.

Pure logic, no docker. The report is tenant-controlled data (a command can
print a forged one), so nothing in it is trusted: the cwd must stay inside
the session root, names and sizes are bounded, and any violation keeps the
session's previous state and says why in a note.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection
from dataclasses import dataclass, field

MAX_VARS = 256
MAX_NAME_BYTES = 128
MAX_VALUE_BYTES = 32 * 1024
MAX_ENV_BYTES = 256 * 1024  # sum of name + value bytes
MAX_CWD_BYTES = 4096  # PATH_MAX

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Set by the runtime on every run, so a stored value would be misleading
# (HOME is always the session root, HOSTNAME is Docker's) or meaningless
# (bash's own bookkeeping). PATH and LANG are only defaults: users may
# change them and the change persists.
RESERVED_NAMES = frozenset({"HOME", "HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_"})
RESERVED_PREFIX = "PG_SHELL_"


def is_reserved(name: str) -> bool:
    return name in RESERVED_NAMES or name.startswith(RESERVED_PREFIX)


@dataclass(frozen=True)
class SessionState:
    cwd: str
    env: dict[str, str] = field(hash=False)
    note: str | None = None  # why (part of) the report was rejected


def parse_report(raw: bytes | None,
                 overflow: bool = False) -> tuple[dict[str, object] | None, str | None]:
    """Split the report — cwd, then NAME=value entries, each NUL-terminated —
    into {"cwd", "env"}; return (report, note-if-unusable). Undecodable
    bytes become lone surrogates, which validation then rejects."""
    if overflow:
        return None, "state report too large"
    if raw is None:
        return None, "no state report (the command was killed or replaced the EXIT trap)"
    if not raw.endswith(b"\0"):
        return None, "state report is malformed"
    cwd, *entries = raw[:-1].decode("utf-8", "surrogateescape").split("\0")
    env: dict[str, str] = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if not sep:
            return None, "state report is malformed"
        env[name] = value
    return {"cwd": cwd or None, "env": env}, None


def _utf8_len(text: str) -> int | None:
    """Byte length, or None if text holds lone surrogates (undecodable bytes)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def validate_cwd(reported: object, previous: str, shell_root: str) -> tuple[str, str | None]:
    if reported is None:
        return previous, "cwd not reported (directory deleted?); keeping the previous one"
    if not isinstance(reported, str):
        return previous, "reported cwd is not a string"
    size = _utf8_len(reported)
    if size is None or "\0" in reported:
        return previous, "reported cwd is not valid UTF-8"
    if size > MAX_CWD_BYTES:
        return previous, "reported cwd is too long"
    # The container resolves symlinks (pwd -P); here only the text is judged,
    # and the host never follows the path. normpath() == reported rules out
    # "..", ".", "//" and trailing slashes, so a prefix test is exact.
    if not reported.startswith("/") or posixpath.normpath(reported) != reported:
        return previous, f"reported cwd {reported!r} is not an absolute normalized path"
    root = posixpath.normpath(shell_root)
    if reported != root and not reported.startswith(root.rstrip("/") + "/"):
        return previous, f"cwd {reported!r} is outside {root}; keeping the previous one"
    return reported, None


def validate_env(reported: object, previous: dict[str, str],
                 hidden: Collection[str] = ()) -> tuple[dict[str, str], str | None]:
    """Return the env to store: the reported one minus reserved names and
    ``hidden`` ones (the command's secrets: never stored, whatever the
    command set them to), or the previous one if any rule is broken."""
    if not isinstance(reported, dict):
        return dict(previous), "reported env is not an object"
    env: dict[str, str] = {}
    total = 0
    for name, value in reported.items():
        if not isinstance(name, str) or not isinstance(value, str):
            return dict(previous), "reported env has a non-string name or value"
        if not NAME_RE.match(name):
            return dict(previous), f"invalid variable name {name[:64]!r} (exported function?)"
        if is_reserved(name) or name in hidden:
            continue
        name_len = _utf8_len(name) or 0
        value_len = _utf8_len(value)
        if value_len is None or "\0" in value:
            return dict(previous), f"${name} is not valid UTF-8"
        if name_len > MAX_NAME_BYTES:
            return dict(previous), f"variable name {name[:32]}… longer than {MAX_NAME_BYTES} bytes"
        if value_len > MAX_VALUE_BYTES:
            return dict(previous), f"${name} is longer than {MAX_VALUE_BYTES} bytes"
        total += name_len + value_len
        env[name] = value
    if len(env) > MAX_VARS:
        return dict(previous), f"more than {MAX_VARS} exported variables"
    if total > MAX_ENV_BYTES:
        return dict(previous), f"exported environment larger than {MAX_ENV_BYTES} bytes"
    return env, None


def resolve_state(
    raw: bytes | None,
    overflow: bool,
    previous_cwd: str,
    previous_env: dict[str, str],
    shell_root: str,
    hidden: Collection[str] = (),
) -> SessionState:
    """The state to store after a command, from its (possibly absent) report."""
    report, note = parse_report(raw, overflow)
    if report is None:
        return SessionState(previous_cwd, dict(previous_env), note)
    cwd, cwd_note = validate_cwd(report.get("cwd"), previous_cwd, shell_root)
    env, env_note = validate_env(report.get("env"), previous_env, hidden)
    notes = [n for n in (cwd_note, env_note) if n]
    return SessionState(cwd, env, "; ".join(notes) or None)
