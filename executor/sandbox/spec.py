"""What every command's container looks like: all the hardening in one place.

Every setting here applies to every container, always (DESIGN.md §4):
read-only root, no network, no capabilities, no-new-privileges with the
engine's default seccomp profile minus io_uring (never "unconfined"), a
non-root user that is no host account (hardening.py), no host paths and no
Docker socket, only the session volume writable plus a small /tmp and
/dev/shm (both tmpfs, so counted in the memory limit), no core dumps, and
runtime-enforced limits.
"""

from __future__ import annotations

from typing import Any

from docker.types import LogConfig, Mount, Ulimit

from .hardening import SANDBOX_USER, process_limits, security_options
from .model import Limits, RunRequest
from .state import NAME_RE, is_reserved

LABEL_COMMAND = "pg-shell.command-id"
LABEL_SESSION = "pg-shell.session-id"
LABEL_WORKER = "pg-shell.worker-id"
# A warm container: started before its command exists (it learns the
# command's id only over stdin, so it carries no LABEL_COMMAND).
LABEL_WARM = "pg-shell.warm"
# Which deployment a container belongs to. reap() only ever looks at its own
# scope, so two deployments (or test runs) sharing one engine never remove
# each other's containers.
LABEL_SCOPE = "pg-shell.scope"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def host_config_args(limits: Limits, shell_root: str, volume: str, runtime: str,
                     seed_from_image: bool = False) -> dict[str, Any]:
    """Keyword arguments for APIClient.create_host_config.

    ``seed_from_image``: let the engine fill an empty volume from the image's
    ``shell_root`` (contents and owner, the sandbox user). Plain volumes need
    it: the engine creates them owned by (container) root, so the sandbox user
    could not write its own home. Loop volumes never are seeded: mkfs already
    made them the sandbox user's.
    """
    pids_limit, nproc = process_limits(runtime, limits.pids)
    return {
        "read_only": True,
        "network_mode": "none",
        "cap_drop": ["ALL"],
        "runtime": runtime,
        "security_opt": security_options(runtime),
        "privileged": False,
        "pids_limit": pids_limit,
        "mem_limit": limits.memory_bytes,
        "memswap_limit": limits.memory_bytes,  # equal: no swap
        "nano_cpus": int(limits.cpus * 1e9),
        "ulimits": [
            Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
            Ulimit(name="fsize", soft=limits.fsize_bytes, hard=limits.fsize_bytes),
            # Hard 0: a crashing program cannot write its memory out (to the
            # volume, past the tenant's view of what it stored).
            Ulimit(name="core", soft=0, hard=0),
            *([Ulimit(name="nproc", soft=nproc, hard=nproc)] if nproc else []),
        ],
        # Sized like /tmp; tmpfs pages count in the container's memory limit.
        "shm_size": limits.tmpfs_bytes,
        # exec is allowed on /tmp: the session volume is executable anyway,
        # so noexec here would only break `./script.sh` in /tmp.
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,exec,size={limits.tmpfs_bytes},mode=1777"},
        # The one and only mount.
        "mounts": [Mount(target=shell_root, source=volume, type="volume",
                         no_copy=not seed_from_image)],
        "auto_remove": False,  # removed after the result is recorded
        # Output reaches us through the attach stream only. The default
        # json-file driver would also keep every byte on the host's disk
        # until removal, cap or not: `yes` wrote ~65 MiB/s there.
        "log_config": LogConfig(type=LogConfig.types.NONE),
    }


def container_args(image: str, labels: dict[str, str], shell_root: str,
                   command: list[str] | None = None) -> dict[str, Any]:
    """Keyword arguments for APIClient.create_container (minus host_config).

    The environment holds only our defaults: the command, its cwd and the
    session's variables reach the supervisor on stdin after the start
    (sandbox-image/supervisor.py), so nothing of the tenant's is in the
    container's configuration.
    """
    return {
        "image": image,
        "command": command,
        "user": SANDBOX_USER,
        "hostname": "sandbox",
        "stdin_open": True,
        # detach=False makes docker-py set StdinOnce: closing our end of the
        # attach socket then reaches the supervisor as EOF.
        "detach": False,
        "tty": False,
        # No network for the engine to set up: the runtime's own new network
        # namespace holds only loopback, as network_mode "none" does, but the
        # engine then skips its network sandbox for the container (a re-exec
        # of dockerd as a prestart hook and a namespace to bind-mount: about
        # 100 ms of CPU per container on a 2-core host, a third of a start).
        # Nor does it write an /etc/hosts (the container's is empty): the
        # image resolves `localhost` itself (libnss-myhostname).
        "network_disabled": True,
        "environment": [f"PATH={DEFAULT_PATH}", "LANG=C.UTF-8", f"HOME={shell_root}"],
        "labels": labels,
        "working_dir": shell_root,
    }


def warm_labels(session_id: str, worker_id: str, scope: str) -> dict[str, str]:
    return {LABEL_WARM: "1", LABEL_SESSION: session_id, LABEL_WORKER: worker_id,
            LABEL_SCOPE: scope}


def command_labels(req: RunRequest, scope: str) -> dict[str, str]:
    return {
        LABEL_COMMAND: str(req.command_id),
        LABEL_SESSION: req.session_id,
        LABEL_WORKER: req.worker_id,
        LABEL_SCOPE: scope,
    }


def session_env(env: dict[str, str]) -> dict[str, str]:
    """The session's variables as the supervisor may export them."""
    return {k: v for k, v in env.items() if NAME_RE.match(k) and not is_reserved(k)}
