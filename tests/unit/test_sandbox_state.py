"""Validation of the cwd/env a container reports (pure logic)."""

from __future__ import annotations

import pytest

from executor.sandbox.state import (
    MAX_ENV_BYTES,
    MAX_VALUE_BYTES,
    MAX_VARS,
    resolve_state,
    validate_cwd,
    validate_env,
)

ROOT = "/home/sandbox"
PREV_ENV = {"OLD": "1"}


def report(cwd: str = ROOT, env: dict[str, str] | None = None) -> bytes:
    """A state report as the entrypoint writes it (between its markers)."""
    entries = [cwd] + [f"{k}={v}" for k, v in (env or {}).items()]
    return b"".join(e.encode("utf-8", "surrogateescape") + b"\0" for e in entries)


@pytest.mark.parametrize("cwd", [ROOT, f"{ROOT}/a", f"{ROOT}/a b/ü", f"{ROOT}/..x"])
def test_cwd_inside_the_root_is_accepted(cwd: str) -> None:
    assert validate_cwd(cwd, f"{ROOT}/prev", ROOT) == (cwd, None)


@pytest.mark.parametrize(
    "cwd",
    [
        "/",
        "/etc",
        "/home/sandboxx",
        "/home/sandbox2/x",
        f"{ROOT}/../etc",
        f"{ROOT}/a/../../..",
        f"{ROOT}/./a",
        f"{ROOT}//a",
        f"{ROOT}/",
        "home/sandbox",
        "",
        f"{ROOT}/a\0b",
        f"{ROOT}/\udcff",
        ROOT + "/" + "a" * 5000,
        42,
    ],
)
def test_cwd_outside_or_unnormalized_keeps_previous(cwd: object) -> None:
    got, note = validate_cwd(cwd, f"{ROOT}/prev", ROOT)
    assert got == f"{ROOT}/prev"
    assert note


def test_missing_cwd_keeps_previous_with_note() -> None:
    assert validate_cwd(None, ROOT, ROOT)[0] == ROOT
    assert validate_cwd(None, ROOT, ROOT)[1]


def test_env_is_taken_minus_reserved_names() -> None:
    reported = {
        "A": "1", "_x9": "", "PATH": "/bin", "LANG": "C",
        "HOME": "/tmp", "HOSTNAME": "h", "PWD": "/", "OLDPWD": "/", "SHLVL": "1", "_": "x",
        "PG_SHELL_NONCE": "n", "PG_SHELL_ANY": "y",
    }
    env, note = validate_env(reported, PREV_ENV)
    assert env == {"A": "1", "_x9": "", "PATH": "/bin", "LANG": "C"}
    assert note is None


@pytest.mark.parametrize(
    ("reported", "why"),
    [
        ({"1A": "x"}, "invalid variable name"),
        ({"A-B": "x"}, "invalid variable name"),
        ({"BASH_FUNC_f%%": "() { :; }"}, "invalid variable name"),
        ({"A" * 129: "x"}, "longer than 128"),
        ({"A": "x" * (MAX_VALUE_BYTES + 1)}, "longer than"),
        ({"A": "é" * (MAX_VALUE_BYTES // 2 + 1)}, "longer than"),  # bytes, not chars
        ({f"V{i}": "" for i in range(MAX_VARS + 1)}, "more than"),
        ({f"V{i}": "x" * (MAX_VALUE_BYTES - 10)
          for i in range(MAX_ENV_BYTES // MAX_VALUE_BYTES + 1)}, "larger than"),
        ({"A": "\udcff"}, "UTF-8"),
        ({"A": 1}, "non-string"),
        (["A"], "not an object"),
    ],
)
def test_env_violation_keeps_previous_env(reported: object, why: str) -> None:
    env, note = validate_env(reported, PREV_ENV)
    assert env == PREV_ENV
    assert note is not None and why in note


def test_env_limits_are_inclusive() -> None:
    env, note = validate_env({f"V{i}": "" for i in range(MAX_VARS)}, PREV_ENV)
    assert note is None and len(env) == MAX_VARS
    env, note = validate_env({"A": "x" * MAX_VALUE_BYTES, "B" * 128: ""}, PREV_ENV)
    assert note is None and len(env) == 2


def test_resolve_state_accepts_a_good_report() -> None:
    state = resolve_state(report(f"{ROOT}/d", {"A": "1"}), False, ROOT, PREV_ENV, ROOT)
    assert (state.cwd, state.env, state.note) == (f"{ROOT}/d", {"A": "1"}, None)


def test_undecodable_bytes_in_a_report_are_rejected() -> None:
    state = resolve_state(b"/home/sandbox\0A=\xff\xfe\0", False, ROOT, PREV_ENV, ROOT)
    assert state.env == PREV_ENV and state.note and "not valid UTF-8" in state.note


def test_resolve_state_judges_cwd_and_env_separately() -> None:
    state = resolve_state(report("/etc", {"A": "1"}), False, ROOT, PREV_ENV, ROOT)
    assert state.cwd == ROOT and state.env == {"A": "1"}
    assert state.note and "outside" in state.note


@pytest.mark.parametrize(
    ("raw", "overflow", "why"),
    [
        (None, False, "no state report"),
        (b"/home/sandbox", False, "malformed"),
        (b"/home/sandbox\0NO_EQUALS_SIGN\0", False, "malformed"),
        (report(), True, "too large"),
    ],
)
def test_unusable_report_keeps_previous_state(raw: bytes | None, overflow: bool, why: str) -> None:
    state = resolve_state(raw, overflow, f"{ROOT}/p", PREV_ENV, ROOT)
    assert (state.cwd, state.env) == (f"{ROOT}/p", PREV_ENV)
    assert state.note and why in state.note


def test_previous_env_is_copied_not_shared() -> None:
    state = resolve_state(None, False, ROOT, PREV_ENV, ROOT)
    state.env["X"] = "y"
    assert PREV_ENV == {"OLD": "1"}
