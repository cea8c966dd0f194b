"""What an executor host knows about its copy of a session's files.

The copy is a Docker volume the tenant's commands write to; the index is a
file beside the volumes, on the host, out of the tenant's reach. It records
the root the copy holds and, per path, the inode and ctime it had when that
root was committed, with the blob it matched. Rules (DESIGN.md §9):

- the copy is used only when the index's root is the session's current root;
- the index is removed before a command starts (a copy whose command did not
  commit is never trusted again), and written back only after the command's
  new root is committed;
- an entry is taken as unchanged only if its kind, mode, size, inode and
  ctime are all as recorded. A tenant cannot set a ctime, and a rename
  changes the inode found at a path, so a stale entry is never reused.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.sandbox.volumes import index_path


@dataclass
class Index:
    root: str | None  # None: the copy's contents are unknown (imported on capture)
    # path -> [kind, mode, size, inode, ctime_ns, object or target]
    entries: dict[str, list[Any]] = field(default_factory=dict)
    trees: set[str] = field(default_factory=set)  # tree hashes of root, all stored


class HostCache:
    def __init__(self, directory: str) -> None:
        self._dir = Path(directory)

    def path(self, session_id: str) -> Path:
        return index_path(self._dir, session_id)

    def load(self, session_id: str) -> Index | None:
        try:
            raw = json.loads(self.path(session_id).read_text())
            return Index(raw["root"], raw["entries"], set(raw["trees"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def forget(self, session_id: str) -> None:
        """The copy is about to change: distrust it until a commit says otherwise."""
        self.path(session_id).unlink(missing_ok=True)

    def save(self, session_id: str, index: Index) -> None:
        """Written whole under a temporary name, then renamed: never half-written."""
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = self.path(session_id)
        tmp = target.with_suffix(".tmp")
        data = {"root": index.root, "entries": index.entries, "trees": sorted(index.trees)}
        with open(tmp, "w") as out:
            json.dump(data, out, separators=(",", ":"))
        os.replace(tmp, target)
