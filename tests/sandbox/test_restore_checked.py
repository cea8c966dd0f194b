"""A restore writes a file only when its bytes hash to the blob its entry
names: the executor sends the SHA-256 of each file with the archive (the
header's "sha256"), and the supervisor puts the bytes in place only once
they match. Attacked with an archive whose bytes were altered on the way (as
a blob altered in the database would be), with one that names no SHA-256
for a file, and with an older executor's archive, which names it in each
file's PAX header, against the real engine and image."""

from __future__ import annotations

import hashlib
import io
import tarfile
from typing import Any

from executor.sandbox import RunRequest
from tests.sandbox.conftest import PREFIX, SHELL_ROOT, _command_ids


def _archive(files: list[tuple[str, bytes]], pax_sha256: list[bytes] | None = None) -> bytes:
    """A tar of (name, bytes sent); ``pax_sha256``: the bytes whose SHA-256
    each file's PAX header names, as an older executor sent it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for at, (name, sent) in enumerate(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(sent), 0o644
            if pax_sha256 is not None:
                info.pax_headers = {"PGSHELL.sha256": hashlib.sha256(pax_sha256[at]).hexdigest()}
            tar.addfile(info, io.BytesIO(sent))
    return out.getvalue()


def _header(*held: bytes, wipe: bool = False) -> dict[str, Any]:
    """A restore's header naming the SHA-256 of the bytes each blob held."""
    return {"wipe": wipe, "delete": [], "sha256": [hashlib.sha256(h).hexdigest() for h in held]}


def _request(image: str, session_id: str) -> RunRequest:
    return RunRequest(command_id=next(_command_ids), session_id=session_id, worker_id=PREFIX,
                      command="", cwd=SHELL_ROOT, env={}, image=image)


def test_a_file_whose_bytes_do_not_match_its_blob_is_never_put_in_place(sandbox, image,
                                                                          session_id, run):
    req = _request(image, session_id)
    first = sandbox.restore(req, _header(b"kept\n", wipe=True), [_archive([("a", b"kept\n")])])
    assert first.restored, first.restore_error
    altered = _archive([("a", b"ALTERED\n"), ("b", b"new\n")])
    second = sandbox.restore(req, _header(b"kept\n", b"new\n"), [altered])
    assert not second.restored
    assert "'a'" in str(second.restore_error) and "do not hash" in str(second.restore_error)
    # Neither the altered bytes nor a half-written file are anywhere in the home.
    listed = run("ls -A; grep -rl ALTERED . || echo none", session=session_id)
    assert listed.output == "none\n", listed.output


def test_a_file_sent_without_its_sha256_is_never_put_in_place(sandbox, image, session_id, run):
    req = _request(image, session_id)
    unnamed = _archive([("a", b"named\n"), ("b", b"unnamed\n")])
    done = sandbox.restore(req, _header(b"named\n", wipe=True), [unnamed])
    assert not done.restored
    assert "'b'" in str(done.restore_error) and "no SHA-256" in str(done.restore_error)
    assert run("ls -A", session=session_id).output == "a\n"


def test_an_older_executors_sha256_in_the_pax_header_is_checked_too(sandbox, image, session_id,
                                                                      run):
    req = _request(image, session_id)
    older = {"wipe": True, "delete": []}  # no "sha256" in the header
    done = sandbox.restore(req, older, [_archive([("a", b"old\n")], pax_sha256=[b"old\n"])])
    assert done.restored, done.restore_error
    altered = _archive([("a", b"ALTERED\n")], pax_sha256=[b"old\n"])
    refused = sandbox.restore(req, {"wipe": False, "delete": []}, [altered])
    assert not refused.restored and "do not hash" in str(refused.restore_error)
    assert run("grep -rl ALTERED . || echo none", session=session_id).output == "none\n"
