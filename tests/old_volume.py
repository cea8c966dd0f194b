"""A session's home as an executor from before the sandbox user's uid 65000
left it: the home and everything in it owned by 1000:1000, links pointing
out of the volume, and no owner marker beside it. Made with this executor's
volume code (loop or plain), then handed back to the old user by a root
container that is test code, as the old executor's commands would have
written it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
from docker.types import Mount

from executor.sandbox.volumes import LoopVolumes, PlainVolumes, owner_path

OLD_USER = "1000:1000"
# What the old executor's tenant left: files and a directory only their
# owner may read, and links to a file of the image and to one of the host.
FILES = ("mkdir -p notes private && echo todo > notes/todo.txt && chmod 600 notes/todo.txt"
         " && echo secret > private/key && chmod 700 private"
         " && ln -s /etc/passwd passwd-link && ln -s {host_target} host-link")
HOST_OWNER = 4242  # the host target's owner: no uid the sandbox knows
# The next command: it writes its home and reads what was there, and shows
# the owner of the image's file a link points at, the owners of all entries
# (links themselves, never followed) and the entries (but a plain volume's
# dot files, seeded from the image).
CHECK = ("echo new > new && echo more >> notes/todo.txt && cat notes/todo.txt private/key"
         " && readlink passwd-link host-link && stat -c %u:%g /etc/passwd"
         " && find . -printf '%U:%G\\n' | sort -u && find . ! -name '.?*' | sort")
ENTRIES = (".", "./host-link", "./new", "./notes", "./notes/todo.txt", "./passwd-link",
           "./private", "./private/key")


def checked(host_target: Path) -> str:
    """CHECK's output once the home is the sandbox user's, files intact."""
    return "".join([f"todo\nmore\nsecret\n/etc/passwd\n{host_target}\n0:0\n65000:65000\n",
                    *(f"{entry}\n" for entry in ENTRIES)])


def make_old(client: docker.DockerClient, volumes: LoopVolumes | PlainVolumes, session_id: str,
             image: str, script: str = "true") -> None:
    """Runs ``script`` as root in the home, then gives all of it to the old user."""
    name = volumes.volume_for(session_id, image)
    client.containers.run(
        image, entrypoint=["/bin/sh", "-ec", f"cd /v; {script}; chown -R -h {OLD_USER} /v"],
        user="0:0", network_disabled=True, remove=True,
        mounts=[Mount("/v", name, type="volume", no_copy=True)])
    owner_path(volumes.state_dir, session_id).unlink()
    volumes.release(session_id)  # as after the upgrade's restart


@contextmanager
def host_target(directory: str) -> Iterator[Path]:
    """A host file a tenant's link points at; nothing may change it."""
    fd, name = tempfile.mkstemp(prefix="pgtest-host-target-", dir=directory)
    os.close(fd)
    path = Path(name)
    path.write_text("host\n")
    os.chown(path, HOST_OWNER, HOST_OWNER)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def untouched(path: Path) -> bool:
    st = os.lstat(path)
    return (st.st_uid, st.st_gid, path.read_text()) == (HOST_OWNER, HOST_OWNER, "host\n")
