"""Who a sandbox runs as and which system calls it may make: the two
settings of every container that come from outside the engine's defaults.

The user: uid and gid 65000, the image's `sandbox` user and the owner of
each session's volume. No host has an account with that id (regular
accounts end below 60000 on Debian and most distributions), so under a
rootful engine without user-namespace remapping a file the tenant creates
belongs to nobody on the host, and a process that escaped would hold no
host user's rights. It is below 65536 so a rootless engine's (or
userns-remap's) default subordinate range of 65536 ids still maps it.

The system calls: the engine's own default seccomp profile minus io_uring
(sandbox-image/seccomp.json, written by ops/seccomp-profile), passed with
every container so no engine default and no "unconfined" ever applies.
"""

from __future__ import annotations

import functools

from executor.resources import resource_dir

SANDBOX_UID = 65000
SANDBOX_GID = 65000
SANDBOX_USER = f"{SANDBOX_UID}:{SANDBOX_GID}"
SECCOMP_FILE = "seccomp.json"


@functools.cache
def seccomp_profile() -> str:
    """The profile's JSON text, as the engine's API takes it ("seccomp=<json>")."""
    return (resource_dir("sandbox-image") / SECCOMP_FILE).read_text(encoding="utf-8")


def security_options() -> list[str]:
    return ["no-new-privileges", f"seccomp={seccomp_profile()}"]
