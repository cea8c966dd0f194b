"""A restore writes a file only when its bytes hash to the blob its entry
names: the executor sends the SHA-256 with each file (PAX PGSHELL.sha256),
and the supervisor puts the bytes in place only once they match. Attacked
with an archive whose bytes were altered on the way (as a blob altered in
the database would be), against the real engine and image."""

from __future__ import annotations

import hashlib
import io
import tarfile

from executor.sandbox import RunRequest
from executor.workspace.restore import SHA256_HEADER
from tests.sandbox.conftest import PREFIX, SHELL_ROOT, _command_ids


def _archive(files: list[tuple[str, bytes, bytes]]) -> bytes:
    """A tar of (name, bytes sent, bytes the blob held) with the SHA-256 of
    the bytes the blob held in each file's header."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, sent, held in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(sent), 0o644
            info.pax_headers = {SHA256_HEADER: hashlib.sha256(held).hexdigest()}
            tar.addfile(info, io.BytesIO(sent))
    return out.getvalue()


def test_a_file_whose_bytes_do_not_match_its_blob_is_never_put_in_place(sandbox, image,
                                                                          session_id, run):
    req = RunRequest(command_id=next(_command_ids), session_id=session_id, worker_id=PREFIX,
                     command="", cwd=SHELL_ROOT, env={}, image=image)
    first = sandbox.restore(req, {"wipe": True, "delete": []},
                            [_archive([("a", b"kept\n", b"kept\n")])])
    assert first.restored, first.restore_error
    altered = _archive([("a", b"ALTERED\n", b"kept\n"), ("b", b"new\n", b"new\n")])
    second = sandbox.restore(req, {"wipe": False, "delete": []}, [altered])
    assert not second.restored
    assert "'a'" in str(second.restore_error) and "do not hash" in str(second.restore_error)
    # Neither the altered bytes nor a half-written file are anywhere in the home.
    listed = run("ls -A; grep -rl ALTERED . || echo none", session=session_id)
    assert listed.output == "none\n", listed.output
