"""Handing a volume made for an older sandbox user to the current one.

Executors before hardening.py's uid/gid 65000 ran commands as 1000:1000, so
their volumes (the home's root and every file in it) belong to 1000: the
sandbox user could not write its own home, and a restore could not delete
what is there. volumes.py calls ``hand_over`` once per volume, before any
container of the session starts, when its marker does not say the volume
is already the current user's.

The fix is the one privileged step in the package, so it is as narrow as
one can make it: a one-shot container of the sandbox image (trusted code on
a read-only root) that runs a fixed ``chown -R -h -P`` over the volume and
nothing else. No tenant code runs in it, nothing of the tenant's is in its
arguments or environment, and it has no network. Root in it holds only
CAP_CHOWN (to change owners) and CAP_DAC_OVERRIDE (to enter directories
mode 0700 of the old uid; not DAC_READ_SEARCH, which would open
open_by_handle_at in the seccomp profile), plus no-new-privileges and the
commands' seccomp profile. ``-h -P`` change each symbolic link itself and
never follow one, and the walk opens every directory without following
links, so a link to /etc/passwd or to a host path is left as it was; even
so, everything outside the volume in that container is the image's
read-only root or its own throwaway mounts: no host path is mounted. It
never runs on the host, where a tenant's link could lead anywhere. An
executor that dies during a hand-over leaves its container behind, in use
of the volume: ``abandoned`` finds such containers for the reaper.
"""

from __future__ import annotations

import time

import docker
import requests.exceptions
from docker.types import LogConfig, Mount

from .engine import engine_errors
from .errors import VolumeError
from .hardening import SANDBOX_USER, security_options

# Which session's volume a hand-over container is working on (operators,
# and tests counting hand-overs).
LABEL_HAND_OVER = "pg-shell.hand-over"
MOUNT = "/mnt"
TIMEOUT_S = 600  # a home of the quota's size, on a slow disk
# Its executor removes a hand-over container within TIMEOUT_S (done, failed
# or given up); one older than this was left by an executor that died.
ABANDONED_AFTER_S = TIMEOUT_S + 60
MEMORY_BYTES = 256 * 1024 * 1024
# chown prints only its complaints: enough to say why it failed, bounded on disk.
LOG = LogConfig(type=LogConfig.types.JSON, config={"max-size": "64k", "max-file": "1"})


def hand_over(client: docker.DockerClient, image: str, volume: str, session_id: str) -> None:
    """Makes the sandbox user own everything in ``volume``; VolumeError if it cannot."""
    api = client.api
    with engine_errors(f"cannot hand volume {volume} to the sandbox user", refused=VolumeError):
        created = api.create_container(
            image=image,
            entrypoint=["/bin/chown"],
            command=["-R", "-h", "-P", SANDBOX_USER, MOUNT],
            user="0:0",
            network_disabled=True,
            labels={LABEL_HAND_OVER: session_id},
            host_config=api.create_host_config(
                read_only=True,
                network_mode="none",
                cap_drop=["ALL"],
                cap_add=["CHOWN", "DAC_OVERRIDE"],
                security_opt=security_options(),
                pids_limit=8,
                mem_limit=MEMORY_BYTES,
                memswap_limit=MEMORY_BYTES,
                log_config=LOG,
                # no_copy: an empty volume stays empty; only commands seed it.
                mounts=[Mount(target=MOUNT, source=volume, type="volume", no_copy=True)],
            ),
        )
        container_id = str(created["Id"])
        try:
            api.start(container_id)
            try:
                status = int(api.wait(container_id, timeout=TIMEOUT_S).get("StatusCode", -1))
            except requests.exceptions.ReadTimeout:
                # Not the engine gone (which is retried): a home this slow
                # would be handed over again and again.
                raise VolumeError(f"handing volume {volume} to the sandbox user took over "
                                  f"{TIMEOUT_S} s") from None
            if status != 0:
                said = api.logs(container_id, tail=5).decode(errors="replace").strip()
                raise VolumeError(f"handing volume {volume} to the sandbox user: chown exited "
                                  f"with {status}: {said or 'no message'}")
        finally:
            api.remove_container(container_id, force=True)  # killed first if it still runs


def abandoned(client: docker.DockerClient, older_than_s: float = ABANDONED_AFTER_S) -> list[str]:
    """Ids of hand-over containers whose executor died during the hand-over,
    whatever its scope: none outlives a live executor's wait, and a volume is
    the engine's, not one deployment's."""
    cutoff = time.time() - older_than_s
    with engine_errors("cannot list hand-over containers"):
        listed = client.api.containers(all=True, filters={"label": LABEL_HAND_OVER})
    return [str(c["Id"]) for c in listed if int(c.get("Created") or 0) < cutoff]
