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
Under gVisor (runsc, registered with --oci-seccomp by ops/gvisor) the same
filter runs inside gVisor's kernel, with two changes for how that kernel
reads it (Debian's release, 2022-12-19):
- clone3 is left to gVisor's kernel. The profile answers clone3 with ENOSYS
  so that glibc falls back to clone, whose flags the filter can inspect;
  gVisor's filters answer every refusal with EPERM instead, on which glibc
  gives up, and no program could start another. gVisor's kernel has no
  clone3 and says ENOSYS itself, so the fallback to the filtered clone stays.
- pselect6 is also named pselect, gVisor's name for it: a name it does not
  know is dropped from the filter, and select() in Python would fail.

The count of processes: under runc the container's pids limit is the
tenant's. Under gVisor's ptrace platform that limit counts the host's side
of the sandbox: the sentry and its gofer (about 40 threads at rest) and, for
each process of the tenant, a stub traced by one host thread per sentry
thread that entered it (about 8.5 per process, measured on a 2-CPU host).
Left at the tenant's count, ten processes would exhaust it and the sentry
would die with the command. So under gVisor the tenant's count is
RLIMIT_NPROC, which gVisor's kernel, this sandbox's alone, counts for the
sandbox (under runc it would count the uid across the host), and the pids
limit on the host threads is sized from it. That size is measured, not a
bound: a command whose processes all run at once on a host with many CPUs
(more sentry threads) may still reach it, and then its own sandbox dies
with it, and no other.
"""

from __future__ import annotations

import functools
import json

from executor.resources import resource_dir

SANDBOX_UID = 65000
SANDBOX_GID = 65000
SANDBOX_USER = f"{SANDBOX_UID}:{SANDBOX_GID}"
SECCOMP_FILE = "seccomp.json"


GVISOR = "runsc"


@functools.cache
def seccomp_profile(runtime: str = "runc") -> str:
    """The profile's JSON text for containers of ``runtime``, as the
    engine's API takes it ("seccomp=<json>")."""
    text = (resource_dir("sandbox-image") / SECCOMP_FILE).read_text(encoding="utf-8")
    if runtime != GVISOR:
        return text
    profile = json.loads(text)
    rules = [rule for rule in profile["syscalls"] if "clone3" not in rule["names"]]
    for rule in rules:
        if "pselect6" in rule["names"]:
            rule["names"] = [*rule["names"], "pselect"]
    profile["syscalls"] = [*rules, {"names": ["clone3"], "action": "SCMP_ACT_ALLOW"}]
    return json.dumps(profile)


GVISOR_HOST_THREADS_AT_REST = 64
GVISOR_HOST_THREADS_PER_PROCESS = 16


def process_limits(runtime: str, pids: int) -> tuple[int, int | None]:
    """(the container's pids limit, its nproc ulimit or None) for a tenant
    allowed ``pids`` processes under ``runtime``."""
    if runtime != GVISOR:
        return pids, None
    return GVISOR_HOST_THREADS_AT_REST + GVISOR_HOST_THREADS_PER_PROCESS * pids, pids


def security_options(runtime: str = "runc") -> list[str]:
    return ["no-new-privileges", f"seccomp={seccomp_profile(runtime)}"]
