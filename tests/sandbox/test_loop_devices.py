"""executor/sandbox/loop_devices.py reads from sysfs what `losetup
--associated` answers: the same devices for an image, through a link to it
too, and none once detached."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.sandbox.loop_devices import loops_of
from tests.conftest import require


def losetup(*args: str) -> str:
    return subprocess.run(["losetup", *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def image(tmp_path: Path) -> Iterator[Path]:
    require(os.geteuid() == 0, "root (attaching a loop device)")
    path = tmp_path / "image"
    path.write_bytes(b"\0" * 1024 * 1024)
    yield path
    for loop in losetup("--noheadings", "--output", "NAME", "--associated", str(path)).split():
        subprocess.run(["losetup", "--detach", loop], check=False)


def test_the_devices_losetup_names_for_an_image(image: Path, tmp_path: Path) -> None:
    assert loops_of(image) == []
    first = losetup("--find", "--show", str(image))
    second = losetup("--find", "--show", str(image))
    other = tmp_path / "other"
    other.write_bytes(b"\0" * 1024 * 1024)
    third = losetup("--find", "--show", str(other))
    try:
        expected = sorted(losetup("--noheadings", "--output", "NAME", "--associated",
                                  str(image)).split())
        assert expected == sorted([first, second])
        assert loops_of(image) == expected
        link = tmp_path / "link"
        link.symlink_to(image)
        assert loops_of(link) == expected  # the file, whatever path names it
        assert loops_of(other) == [third]
    finally:
        subprocess.run(["losetup", "--detach", third], check=False)
    subprocess.run(["losetup", "--detach", first, second], check=True)
    assert loops_of(image) == []


def test_no_image_no_devices(tmp_path: Path) -> None:
    assert loops_of(tmp_path / "missing") == []
