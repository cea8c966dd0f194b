"""The sandbox image's layers as every storage driver sees them.

overlay2 ignores the mode a layer gives the root directory, but vfs (where
a rootless engine falls back to when its data lives on an overlay, e.g. on
a host that is itself a container) applies it: a layer whose ``./`` only
root may enter keeps the sandbox user out of /, and no command can start
("stat /opt/pg-shell/supervisor: permission denied"). The mode is read
from `docker save`, since an overlay2 engine cannot show it."""

from __future__ import annotations

import stat
import subprocess
import tarfile

import pytest

pytestmark = pytest.mark.docker


def root_modes(image: str) -> dict[str, int]:
    """The mode each layer of ``image`` gives its root directory (layers
    that carry no root entry are left out)."""
    modes: dict[str, int] = {}
    with subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE) as save:
        assert save.stdout is not None
        with tarfile.open(fileobj=save.stdout, mode="r|") as outer:
            for member in outer:
                if not member.name.endswith("layer.tar"):
                    continue
                layer = outer.extractfile(member)
                assert layer is not None
                with tarfile.open(fileobj=layer, mode="r|") as inner:
                    for entry in inner:
                        if entry.name in (".", "./"):
                            modes[member.name] = entry.mode
                        break  # the root entry, if any, comes first
    assert save.returncode == 0
    return modes


def test_every_layer_lets_the_sandbox_user_into_the_root_directory(sandbox_image: str) -> None:
    modes = root_modes(sandbox_image)
    assert modes, "no layer carries a root directory entry: nothing was checked"
    closed = {layer: oct(mode) for layer, mode in modes.items()
              if mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH}
    assert not closed, f"layers whose / the sandbox user cannot enter: {closed}"
