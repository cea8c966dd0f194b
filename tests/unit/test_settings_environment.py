"""Reading the environment: the original pg_shell's names as deprecated aliases
(one warning each, ours winning), and a PG_SHELL_* name that is no setting
refused with the closest valid name."""

from __future__ import annotations

import logging
import os

import pytest

from executor.config import OPS_ONLY_VARIABLES, load_settings, setting_variables
from executor.environment import ALIASES, IGNORED
from executor.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's settings only: none of the runner's PG_SHELL_* or old names."""
    for name in list(os.environ):
        if name.upper().startswith("PG_SHELL_") or name in (*ALIASES, *IGNORED, "DATABASE_URL"):
            monkeypatch.delenv(name)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_originals_names_set_our_settings_with_one_warning_each(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    old = {"PG_CONN": "postgresql://old@db/pg_shell", "COMMAND_TIMEOUT": "5",
           "COMMAND_LEASE_SECONDS": "60", "COMMAND_LEASE_REFRESH_SECONDS": "20",
           "EXECUTOR_WORKER_ID": "host:1:abc", "CLEANUP_DAYS": "7", "POLL_INTERVAL": "2.5",
           "MAX_OUTPUT_BYTES": "65536"}
    assert set(old) == set(ALIASES)
    for name, value in old.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING):
        settings = load_settings()
    assert (settings.database_url, settings.timeout_s, settings.lease_s,
            settings.heartbeat_interval_s, settings.worker_id, settings.retention_days,
            settings.poll_interval_s, settings.output_cap_bytes) == (
        "postgresql://old@db/pg_shell", 5.0, 60, 20.0, "host:1:abc", 7.0, 2.5, 65536)
    warnings = warnings_of(caplog)
    assert len(warnings) == len(old)
    for name in old:
        [warning] = [w for w in warnings if w.startswith(f"{name} ")]
        assert "deprecated" in warning
    assert "COMMAND_TIMEOUT is deprecated: read as PG_SHELL_TIMEOUT_S; rename it" in warnings
    assert "PG_CONN is deprecated: read as PG_SHELL_DATABASE_URL; rename it" in warnings


def test_our_names_win_over_the_originals(monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("COMMAND_TIMEOUT", "5")
    monkeypatch.setenv("PG_SHELL_TIMEOUT_S", "7")
    monkeypatch.setenv("PG_CONN", "postgresql://old@db/x")
    monkeypatch.setenv("DATABASE_URL", "postgresql://new@db/x")
    with caplog.at_level(logging.WARNING):
        settings = load_settings()
    assert (settings.timeout_s, settings.database_url) == (7.0, "postgresql://new@db/x")
    assert sorted(warnings_of(caplog)) == [
        "COMMAND_TIMEOUT is ignored: PG_SHELL_TIMEOUT_S is set too "
        "(COMMAND_TIMEOUT is the original pg_shell's name)",
        "PG_CONN is ignored: DATABASE_URL is set too (PG_CONN is the original pg_shell's name)"]


def test_the_originals_names_without_a_counterpart_are_named_as_ignored(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("SHELL_ROOT", "/home/pg-shell-command")
    monkeypatch.setenv("EXECUTOR_ALLOWED_COMMANDS", "/usr/bin/printf")
    with caplog.at_level(logging.WARNING):
        settings = load_settings()
    assert settings.shell_root == "/home/sandbox"
    warnings = warnings_of(caplog)
    assert len(warnings) == 2
    assert any(w.startswith("SHELL_ROOT is ignored: a session's home is always /home/sandbox")
               for w in warnings)


def test_a_bad_value_under_an_old_name_names_the_old_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMAND_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match=r"^invalid settings: COMMAND_TIMEOUT \(read as "
                                          r"PG_SHELL_TIMEOUT_S\): Input should be a valid number"):
        load_settings()


@pytest.mark.parametrize(("typo", "closest"), [
    ("PG_SHELL_TIMEOUT", "PG_SHELL_TIMEOUT_S"),
    ("PG_SHELL_CONCURENCY", "PG_SHELL_CONCURRENCY"),
    ("PG_SHELL_MEMORY", "PG_SHELL_MEMORY_MB"),
    ("pg_shell_allow_rootfull", "PG_SHELL_ALLOW_ROOTFUL"),
])
def test_an_unknown_setting_is_refused_naming_the_closest(
        monkeypatch: pytest.MonkeyPatch, typo: str, closest: str) -> None:
    monkeypatch.setenv(typo, "5")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert str(raised.value) == f"unknown setting {typo}: did you mean {closest}?"


def test_an_unknown_setting_with_nothing_close_points_to_the_settings_doc(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_SHELL_XYZZY", "1")
    with pytest.raises(ConfigError, match=r'^unknown setting PG_SHELL_XYZZY: '
                                          r'see docs/configuration\.md$'):
        load_settings()


def test_the_removed_root_setting_is_refused_with_the_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_SHELL_SHELL_ROOT", "/srv/home")
    with pytest.raises(ConfigError, match=r"^PG_SHELL_SHELL_ROOT is no longer a setting: a "
                                          r"session's home is always /home/sandbox"):
        load_settings()


def test_the_names_only_ops_scripts_read_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OPS_ONLY_VARIABLES:
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("PG_SHELL_TIMEOUT_S", "9")
    assert load_settings().timeout_s == 9.0


def test_ops_only_names_are_no_settings_and_every_setting_has_a_variable() -> None:
    variables = setting_variables()
    assert not set(OPS_ONLY_VARIABLES) & set(variables)
    assert variables["DATABASE_URL"] == variables["PG_SHELL_DATABASE_URL"] == "database_url"
    assert variables["PG_SHELL_TIMEOUT_S"] == "timeout_s"
