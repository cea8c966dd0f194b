"""ops/systemd: every unit passes `systemd-analyze verify`, and the promises
docs/operations.md makes about them (Type=notify with a watchdog, the hardening, a
stop timeout above the drain grace, no Docker for the gateway) are in the files.

systemd is not PID 1 on test machines, so the units cannot be started; verify
is the closest check. It insists that every ExecStart binary exists, so the
units are verified inside a scratch root (--root) laid out like a production
host: the units in /etc/systemd/system, systemd's own units, and at
/opt/pg-shell/.venv/bin/pg-shell a copy of this checkout's real `pg-shell`
entry point (which is then run, so the command lines are real too).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from executor.config import Settings
from tests.conftest import require

UNITS = Path(__file__).resolve().parents[2] / "ops" / "systemd"
ENTRY_POINT = "/opt/pg-shell/.venv/bin/pg-shell"
DOCKERD_ROOTLESS = "/usr/share/docker.io/contrib/dockerd-rootless.sh"
UNIT_FILES = sorted(p.name for p in UNITS.iterdir() if p.suffix in (".service", ".timer"))
SERVICES_RUNNING_PG_SHELL = ["pg-shell-executor.service", "pg-shell-gateway.service",
                             "pg-shell-cleanup.service"]
HARDENING = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes", "ProtectHome": "yes",
    "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes", "CapabilityBoundingSet": "",
}
# Settings of the headless CLI client, not of a server: not in the servers' env file.
CLIENT_ONLY = {"url", "token", "session"}


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values (systemd allows a key more than once)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not key=value: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def one(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = unit.get(section, {}).get(key, [])
    assert len(values) == 1, f"[{section}] {key}: {values}"
    return values[0]


def seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}
    for suffix in sorted(units, key=len, reverse=True):
        if value.endswith(suffix) and value[: -len(suffix)].isdigit():
            return int(value[: -len(suffix)]) * units[suffix]
    return float(value)


@pytest.fixture(scope="module")
def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    require(found is not None, "systemd-analyze (Debian package systemd; ops/install-packages)")
    return str(found)


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    """A scratch root with the units installed where docs/operations.md says."""
    root = tmp_path / "root"
    (root / "etc/systemd").mkdir(parents=True)
    shutil.copytree(UNITS, root / "etc/systemd/system",
                    ignore=shutil.ignore_patterns("*.example", "*.conf"))
    dropin = root / "etc/systemd/system/pg-shell-executor.service.d"
    # systemd's own units (targets the units order against).
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    (root / "bin").symlink_to("usr/bin")
    (root / "usr/bin").mkdir(parents=True)
    shutil.copy2("/usr/bin/kill", root / "usr/bin/kill")
    # The project as installed: this checkout's own console script.
    entry = root / ENTRY_POINT.lstrip("/")
    entry.parent.mkdir(parents=True)
    shutil.copy2(Path(sys.executable).parent / "pg-shell", entry)
    require(Path(DOCKERD_ROOTLESS).exists(), f"{DOCKERD_ROOTLESS} (Debian package docker.io)")
    target = root / DOCKERD_ROOTLESS.lstrip("/")
    target.parent.mkdir(parents=True)
    shutil.copy2(DOCKERD_ROOTLESS, target)
    dropin.mkdir()
    return root


def verify(analyze: str, root: Path, unit: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([analyze, "verify", f"--root={root}", unit], capture_output=True,
                          text=True, timeout=120, cwd=root / "etc/systemd/system")


@pytest.mark.parametrize("unit", UNIT_FILES)
def test_unit_passes_systemd_analyze_verify(systemd_analyze: str, host_root: Path,
                                            unit: str) -> None:
    done = verify(systemd_analyze, host_root, unit)
    # Unknown keys and bad values are only warnings: any output is a failure.
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_executor_with_the_rootful_loop_dropin_passes_verify(systemd_analyze: str,
                                                             host_root: Path) -> None:
    dropin = host_root / "etc/systemd/system/pg-shell-executor.service.d"
    shutil.copy2(UNITS / "rootful-loop.conf", dropin / "rootful-loop.conf")
    done = verify(systemd_analyze, host_root, "pg-shell-executor.service")
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    merged = parse_unit(UNITS / "rootful-loop.conf")["Service"]
    assert merged["User"] == ["root"] and merged["StateDirectory"] == ["pg-shell/volumes"]


def test_verify_catches_a_missing_entry_point(systemd_analyze: str, host_root: Path) -> None:
    """The harness is live: without the installed binary, verify fails."""
    (host_root / ENTRY_POINT.lstrip("/")).unlink()
    done = verify(systemd_analyze, host_root, "pg-shell-executor.service")
    assert done.returncode != 0
    assert "is not executable" in done.stderr


@pytest.mark.parametrize("unit", SERVICES_RUNNING_PG_SHELL)
def test_exec_start_is_a_real_pg_shell_command(unit: str) -> None:
    argv = one(parse_unit(UNITS / unit), "Service", "ExecStart").split()
    assert argv[0] == ENTRY_POINT
    local = [str(Path(sys.executable).parent / "pg-shell"), *argv[1:], "--help"]
    done = subprocess.run(local, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(argv[1:])}: {done.stderr[-2000:]}"


@pytest.mark.parametrize("unit", SERVICES_RUNNING_PG_SHELL)
def test_services_are_hardened(unit: str) -> None:
    service = parse_unit(UNITS / unit)["Service"]
    assert {k: service.get(k) for k in HARDENING} == {k: [v] for k, v in HARDENING.items()}
    assert service["EnvironmentFile"][0] == "/etc/pg-shell/pg-shell.env"
    user = one({"Service": service}, "Service", "User")
    assert user not in ("root", "0")


def test_executor_is_a_notify_service_with_watchdog_and_drain() -> None:
    service = parse_unit(UNITS / "pg-shell-executor.service")["Service"]
    assert {k: service.get(k) for k in ("Type", "NotifyAccess", "Restart", "KillMode", "User")} == {
        "Type": ["notify"], "NotifyAccess": ["main"], "Restart": ["on-failure"],
        "KillMode": ["mixed"], "User": ["pg-shell"]}
    watchdog = seconds(service["WatchdogSec"][0])
    # The main loop feeds the watchdog at least every poll interval.
    assert watchdog >= 10 * Settings.model_fields["poll_interval_s"].default
    grace = Settings.model_fields["shutdown_grace_s"].default
    assert seconds(service["TimeoutStopSec"][0]) > grace + 10
    assert service["Environment"] == ["PG_SHELL_WORKER_ID=%H"]
    # The safe default: a rootless engine reached through its group; on disk only its state
    # directory (the signing key), shared with the cleanup service.
    assert service["SupplementaryGroups"] == ["pg-shell-rootless"]
    assert "ReadWritePaths" not in service
    assert service["StateDirectory"] == ["pg-shell"] and service["StateDirectoryMode"] == ["0700"]
    cleanup = parse_unit(UNITS / "pg-shell-cleanup.service")["Service"]
    assert (cleanup["User"], cleanup["StateDirectory"]) == (service["User"],
                                                            service["StateDirectory"])


def test_gateway_has_no_docker_and_no_executor_credentials() -> None:
    service = parse_unit(UNITS / "pg-shell-gateway.service")["Service"]
    assert "SupplementaryGroups" not in service
    assert service["DynamicUser"] == ["yes"]
    unset = " ".join(service["UnsetEnvironment"]).split()
    secrets = {"DATABASE_URL", "PG_SHELL_DATABASE_URL", "DOCKER_HOST", "PG_SHELL_DOCKER_HOST"}
    assert secrets <= set(unset)
    hidden = " ".join(service["InaccessiblePaths"]).split()
    assert {"-/run/docker.sock", "-/var/run/docker.sock", "-/run/pg-shell-rootless"} <= set(hidden)


def test_cleanup_timer_starts_the_cleanup_service() -> None:
    timer = parse_unit(UNITS / "pg-shell-cleanup.timer")
    assert timer["Timer"]["OnCalendar"] and timer["Install"]["WantedBy"] == ["timers.target"]
    service = parse_unit(UNITS / "pg-shell-cleanup.service")["Service"]
    assert service["Type"] == ["oneshot"]
    assert service["ExecStart"] == [f"{ENTRY_POINT} cleanup --once"]


def test_env_example_names_every_setting_with_a_comment() -> None:
    lines = (UNITS / "pg-shell.env.example").read_text().splitlines()
    named: dict[str, int] = {}
    for i, line in enumerate(lines):
        key = line.lstrip("#").partition("=")[0].strip()
        if line.lstrip("#").partition("=")[1] and key.isupper() and " " not in key:
            named.setdefault(key, i)
    missing = [f"PG_SHELL_{f.upper()}" for f in Settings.model_fields
               if f not in CLIENT_ONLY and f"PG_SHELL_{f.upper()}" not in named]
    assert not missing, f"add these to ops/systemd/pg-shell.env.example: {missing}"
    assert "DATABASE_URL" in named
    for key, i in named.items():
        assert lines[i - 1].startswith("#"), f"{key} has no comment above it"
        assert key == "DATABASE_URL" or key.startswith("PG_SHELL_"), key
