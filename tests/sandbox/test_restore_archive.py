"""The supervisor reads a restore's archive itself (not with tarfile):
every kind of entry the executor writes comes out as it went in, and an
archive that is cut short, or holds an entry of another type, fails the
restore. Against the real engine and image."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from typing import Any

from executor.sandbox import RunRequest
from tests.sandbox.conftest import PREFIX, SHELL_ROOT, _command_ids

KINDS = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
         "hard link": tarfile.LNKTYPE}
LONG = "n" * 150  # past a ustar header's 100 bytes: in a PAX header
ENTRIES: list[tuple[str, str, int, Any]] = [
    ("d", "dir", 0o755, b""),
    (f"d/{LONG}", "file", 0o644, b"long name\n"),
    ("d/ünï cödé", "file", 0o600, b"utf-8 name\n"),
    ("d/new\nline", "file", 0o644, b""),
    ("d/one-block", "file", 0o644, b"b" * 512),
    ("d/big", "file", 0o755, os.urandom(2 * 1024 * 1024 + 7)),  # more than a frame
    ("d/far", "symlink", 0o777, "t/" * 80),  # a target past 100 bytes
    ("d/ro", "dir", 0o500, b""),
    ("d/ro/inside", "file", 0o400, b"read-only\n"),
]


def _archive(entries: list[tuple[str, str, int, Any]]) -> tuple[bytes, list[str]]:
    """The archive as the executor writes it, and its files' SHA-256s."""
    out, digests = io.BytesIO(), []
    for path, kind, mode, data in entries:
        info = tarfile.TarInfo(path)
        info.type, info.mode = KINDS[kind], mode
        if kind in ("symlink", "hard link"):
            info.linkname = data
        if kind == "file":
            info.size = len(data)
            digests.append(hashlib.sha256(data).hexdigest())
        out.write(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict"))
        if kind == "file":
            out.write(data + b"\0" * (-len(data) % 512))
    out.write(b"\0" * 1024)
    return out.getvalue(), digests


def _restore(sandbox: Any, image: str, session_id: str, archive: bytes,
             digests: list[str]) -> Any:
    req = RunRequest(command_id=next(_command_ids), session_id=session_id, worker_id=PREFIX,
                     command="", cwd=SHELL_ROOT, env={}, image=image)
    return sandbox.restore(req, {"wipe": True, "delete": [], "sha256": digests}, [archive])


def test_every_kind_of_entry_comes_out_as_it_went_in(sandbox, image, session_id, run) -> None:
    done = _restore(sandbox, image, session_id, *_archive(ENTRIES))
    assert done.restored, done.restore_error
    script = ("for f in d/* d/ro/*; do "
              "printf '%s %s ' \"$f\" \"$(stat -c %a \"$f\")\"; "
              "if [ -L \"$f\" ]; then readlink \"$f\"; "
              "elif [ -d \"$f\" ]; then echo dir; else sha256sum < \"$f\" | cut -c1-64; fi; done")
    seen = run(script, session=session_id).output
    expected = [f"{path} {mode:o} " + (data if kind == "symlink" else "dir" if kind == "dir"
                                       else hashlib.sha256(data).hexdigest())
                for path, kind, mode, data in ENTRIES[1:]]
    # Line by line, in any order (one name holds a newline: split alike).
    assert sorted(seen.splitlines()) == sorted("\n".join(expected).splitlines())


def test_an_archive_cut_short_fails_the_restore(sandbox, image, session_id) -> None:
    archive, digests = _archive(ENTRIES)
    done = _restore(sandbox, image, session_id, archive[:len(archive) // 2], digests)
    assert not done.restored
    assert "ended early" in str(done.restore_error)


def test_an_entry_of_another_type_fails_the_restore(sandbox, image, session_id) -> None:
    archive, digests = _archive([("a", "file", 0o644, b"a\n"), ("b", "hard link", 0o644, "a")])
    done = _restore(sandbox, image, session_id, archive, digests)
    assert not done.restored
    assert "type b'1'" in str(done.restore_error)
