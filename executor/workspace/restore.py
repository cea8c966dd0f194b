"""Before a command: make this host's copy of the session hold its root.

A copy whose index names the session's root is used as it is. A copy that
holds an older committed root gets only the difference (the database
compares the two trees without entering equal subtrees, and only the blobs
that differ are read); any other copy is wiped and rebuilt. Either way the
writing happens inside a locked-down container (Sandbox.restore), fed a tar
stream built here from blobs read from the database, never by extracting
tenant data on the host.
"""

from __future__ import annotations

import itertools
import tarfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from executor.db.workspace import WorkspaceStore
from executor.errors import PgShellError

from .cache import HostCache, Index

BLOCK = 512
TAR_TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE}

# (header, tar stream) -> the restore container's conversation
Restorer = Callable[[dict[str, Any], Iterable[bytes]], Any]


class RestoreFailed(PgShellError):
    """The host's copy could not be brought to the session's root."""


def prepare(store: WorkspaceStore, cache: HostCache, session_id: str, root: str | None,
            restorer: Restorer) -> Index:
    """The index of a copy that holds ``root`` (restored if needed). A
    session without a root (from before the workspace) keeps what its volume
    holds: its next capture imports all of it."""
    index = cache.load(session_id)
    if root is None:
        return Index(None)
    if index is not None and index.root == root:
        return index
    listing = store.listing(root)
    if index is not None and index.root is not None:
        changes = store.diff(index.root, root)
        # Everything deleted or replaced goes first; a directory whose mode
        # alone changed stays (its entry in the tar sets the mode).
        delete = [c["path"] for c in changes
                  if c["change"] == "deleted"
                  or (c["change"] == "modified" and not c["kind"] == c["old_kind"] == "dir")]
        writes = [c for c in changes if c["change"] != "deleted"]
        header: dict[str, Any] = {"wipe": False, "delete": delete}
    else:
        writes = listing
        header = {"wipe": True, "delete": []}
    cache.forget(session_id)  # half-restored is untrusted too
    conversation = restorer(header, tar_stream(store, writes))
    if not conversation.restored or not conversation.manifest_done:
        raise RestoreFailed(f"restoring session {session_id}: "
                            f"{conversation.restore_error or 'no answer'}")
    return _index_of(root, listing, conversation.manifest)


def tar_stream(store: WorkspaceStore, entries: list[dict[str, Any]]) -> Iterator[bytes]:
    """A tar archive of ``entries`` (rows of a listing or a diff), each file's
    bytes streamed chunk by chunk from the database."""
    for e in entries:
        info = tarfile.TarInfo(e["path"])
        info.type = TAR_TYPES[e["kind"]]
        info.mode = e["mode"]
        info.size = e["size"] if e["kind"] == "file" else 0
        info.linkname = e["target"] or ""
        yield info.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict")
        if e["kind"] != "file":
            continue
        sent = 0
        for seq in itertools.count():
            chunk = store.blob_chunk(e["object"], seq)
            if chunk is None:
                break
            sent += len(chunk)
            yield chunk
        if sent != info.size:
            raise RestoreFailed(f"blob {e['object']} holds {sent} bytes, expected {info.size}")
        if sent % BLOCK:
            yield b"\0" * (BLOCK - sent % BLOCK)
    yield b"\0" * (2 * BLOCK)


def _index_of(root: str, listing: list[dict[str, Any]], manifest: list[list[Any]]) -> Index:
    """The index of a freshly restored copy: the listing's objects, with the
    inodes and ctimes the restore container found."""
    found = {item[0]: item for item in manifest}
    entries: dict[str, list[Any]] = {}
    for row in listing:
        item = found.pop(row["path"], None)
        if item is None or item[1] != row["kind"]:
            raise RestoreFailed(f"after the restore, {row['path']!r} is not what the root holds")
        value = row["object"] if row["kind"] == "file" else row["target"]
        entries[row["path"]] = [row["kind"], row["mode"],
                                row["size"] if row["kind"] == "file" else 0,
                                item[4], item[5], value]
    if found:
        raise RestoreFailed(f"after the restore, {next(iter(found))!r} "
                            "is there but not in the root")
    trees = {root} | {row["object"] for row in listing if row["kind"] == "dir"}
    return Index(root, entries, trees)
