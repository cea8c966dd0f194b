"""What an image must be before it is promoted (`pg-shell image promote`):
it carries the supervisor of the protocol this executor speaks, has the
sandbox user's home, and holds no set-uid or set-gid file the sandbox user
can see. A template is built FROM the sandbox image and may install
anything; these are the parts of the image contract a Dockerfile could
break. The probe runs as locked down as a command (the sandbox user, no
network, no capabilities, read-only root, the seccomp profile, small
limits), so a hostile image gains nothing by being checked."""

from __future__ import annotations

from typing import Any

import docker

from .engine import ENGINE_ERRORS, engine_error
from .hardening import SANDBOX_USER, security_options
from .protocol import PROTOCOL

# Each line answers one question; find lists what no-new-privileges would
# otherwise be the only defence against.
PROBE = ("/opt/pg-shell/supervisor protocol || echo none; "
         "test -d /home/sandbox -a -O /home/sandbox && echo home || echo nohome; "
         "find / -xdev -type f \\( -perm -4000 -o -perm -2000 \\) 2>/dev/null | head -n 20")


def image_problems(client: docker.DockerClient, digest: str) -> list[str]:
    """Why ``digest`` may not be promoted (empty: it may)."""
    try:
        raw: Any = client.containers.run(
            digest, entrypoint=["/bin/sh", "-c", PROBE], user=SANDBOX_USER, network_mode="none",
            cap_drop=["ALL"], read_only=True, security_opt=security_options(),
            mem_limit="256m", pids_limit=64, remove=True, stdout=True, stderr=False)
    except docker.errors.ContainerError as exc:
        return [f"the probe failed in it (exit {exc.exit_status}): it needs /bin/sh"]
    except ENGINE_ERRORS as exc:
        raise engine_error(exc, f"probe image {digest}") from exc
    lines = raw.decode("utf-8", "replace").splitlines()
    protocol, home, setuid = (lines[0] if lines else ""), (lines[1:2] or [""])[0], lines[2:]
    problems = []
    if protocol != str(PROTOCOL):
        problems.append(f"its supervisor speaks protocol {protocol or 'none'}, this executor "
                        f"{PROTOCOL}: build it FROM the sandbox image of this release")
    if home != "home":
        problems.append("it has no /home/sandbox owned by the sandbox user (uid 65000)")
    if setuid:
        problems.append(f"set-uid or set-gid files: {', '.join(setuid)} (remove the bits: "
                        "chmod ug-s)")
    return problems
