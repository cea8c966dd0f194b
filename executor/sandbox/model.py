"""Plain records passed into and out of the sandbox."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Per-command limits; each one is enforced by the container runtime."""

    timeout_s: float = 30
    memory_bytes: int = 256 * MiB  # also the memory+swap limit: no swap
    pids: int = 128  # processes: --pids-limit under runc (hardening.process_limits)
    cpus: float = 1.0
    nofile: int = 256
    fsize_bytes: int = 64 * MiB
    tmpfs_bytes: int = 16 * MiB
    output_cap_bytes: int = 1 * MiB
    terminal_output_cap_bytes: int = 64 * MiB  # a terminal redraws: `top` for an hour is megabytes
    disk_quota_bytes: int = 256 * MiB  # size of the session's ext4 image
    # After the command, not the runtime's: how long its files may take to
    # save (the scan, then 1 s more per capture_bytes_per_s changed bytes).
    capture_base_s: float = 30.0
    capture_bytes_per_s: int = 4 * MiB


@dataclass(frozen=True)
class Interaction:
    """A command that takes input: on a terminal of cols x rows (``tty``),
    or with a stdin pipe. A terminal's time limits are the tenant's."""

    tty: bool
    cols: int = 80
    rows: int = 24
    idle_s: float = 900.0  # ended after this long without input or output
    max_s: float = 7200.0  # instead of the batch time limit


@dataclass(frozen=True)
class RunRequest:
    command_id: int
    session_id: str
    worker_id: str
    command: str
    cwd: str  # the session's cwd at claim time
    env: dict[str, str] = field(hash=False)  # the session's exported env at claim time
    image: str  # an immutable image id (sha256:…) or a tag
    interaction: Interaction | None = None  # None: stdin is /dev/null
    runtime: str | None = None  # the container runtime (None: the sandbox's default)
    # The command's secrets, name → value: in its environment, never in the
    # state it leaves (nor in a repr that could reach a log).
    secrets: dict[str, str] = field(default_factory=dict, hash=False, repr=False)


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    reason: str | None  # None, "timeout", "oom", "cancelled"
    output_bytes: int  # bytes the command wrote (state report excluded), kept or not
    truncated: bool
    duration_s: float  # start → exit
    cwd: str  # validated new cwd, or the request's
    env: dict[str, str] = field(hash=False)  # validated new env, or the request's
    state_note: str | None  # why the reported state was rejected (None: accepted)
    container_id: str
    # The home's entries after the command ([path, kind, mode, size, inode,
    # ctime_ns, target], or [directory] for one found as the receiver knows
    # it; tenant data), or None when the files could not be
    # captured (timeout, cancel, a scan that did not finish).
    manifest: list[list[Any]] | None = field(default=None, hash=False)
    skipped: list[Any] = field(default_factory=list, hash=False)  # [path, why] the scan left out
    skipped_more: int = 0  # skipped entries beyond those listed
    capture_note: str | None = None  # why the files were not captured, when the runner knows
