"""One executor host's part in the workspace, as the worker uses it: before
a command, a copy that holds the session's root and a capture ready to
receive its changes; after it, the new root and what to tell the user."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from executor.db.workspace import WorkspaceStore
from executor.sandbox import RunRequest, RunResult, Sandbox
from executor.sandbox.protocol import Conversation
from executor.sandbox.volumes import LoopVolumes

from .cache import Dir, HostCache, Index
from .capture import Capture, Captured, CaptureLimits
from .changes import ChangeRecords
from .restore import RestoreFailed, prepare
from .tree import EMPTY_TREE

MAX_NOTED_SKIPS = 5


@dataclass(frozen=True)
class Outcome:
    root_after: str | None
    captured: Captured | None
    note: str | None  # for the command's output: what was not saved, and why
    # The command ran to its end but its files could not be saved: it fails
    # with this reason, and the session's files stay as they were.
    failure: str | None = None


class HostFiles:
    def __init__(self, sandbox: Sandbox, cache_dir: str, limits: CaptureLimits,
                 change_records: bool = True) -> None:
        self._sandbox = sandbox
        self._cache = HostCache(cache_dir)
        self._limits = limits
        self._records: ChangeRecords | None = None
        # A loop volume starts as an empty filesystem; a plain one as the
        # image's home, which is not empty, so only the first says so. A
        # loop volume is a file system of its own, whose changes the kernel
        # records (a plain one shares the engine's: its captures walk it).
        if isinstance(sandbox.volumes, LoopVolumes):
            sandbox.volumes.on_made = self._made_empty
            if change_records:
                self._records = ChangeRecords(sandbox.volumes.mountpoint)
                sandbox.on_mounted = self._records.watch

    def _made_empty(self, session_id: str) -> None:
        """The session's copy was made just now (and nothing has mounted
        it): it holds the empty tree."""
        self._cache.save(session_id, Index(EMPTY_TREE, {"": Dir.of(EMPTY_TREE, 0, {})}, {"": {}}))

    def prepare(self, store: WorkspaceStore, req: RunRequest, root: str | None) -> Capture:
        """Restores the copy if needed (RestoreFailed, SandboxError), then
        distrusts it: from here on only a commit vouches for it."""
        def restorer(header: dict[str, Any], tar: Iterable[bytes]) -> Conversation:
            return self._sandbox.restore(req, header, tar)

        index = self._cache.load(req.session_id)
        if index is None:
            # Perhaps no copy yet: make it before the index is read, so that
            # a new one is known to be empty, not wiped by a restore.
            self._sandbox.volumes.volume_for(req.session_id, req.image)
            index = self._cache.load(req.session_id)
        try:
            index = prepare(store, self._cache, req.session_id, root, restorer, index)
        except RestoreFailed:
            # An incremental update that did not add up: rebuild from nothing.
            self._cache.forget(req.session_id)
            index = prepare(store, self._cache, req.session_id, root, restorer, None)
        if self._records is not None and not index.stored and index.root is not None:
            # Restored just now, and the restore's own scan is the index:
            # the record is complete from here (the restore's writes dropped).
            self._records.take(req.session_id, None)
            index.watch = self._records.token(req.session_id)
        self._cache.forget(req.session_id)
        return Capture(store, index, self._limits, self._records, req.session_id)

    def finish(self, capture: Capture, result: RunResult, root_before: str | None) -> Outcome:
        """The root the command leaves (its trees stored), or the one it
        started from when its files cannot be saved."""
        captured = capture.commit_trees() if result.manifest is not None else None
        notes = []
        failure = None
        if result.manifest is None:
            if result.reason:
                notes.append("files not saved: the command did not finish")
            else:
                why = result.capture_note or "the scan of the home did not finish"
                failure = f"files not saved: {why}"
        elif captured is None:
            failure = f"files not saved: {capture.failure}"
        if failure:
            notes.append(failure)
        for item in result.skipped[:MAX_NOTED_SKIPS]:
            path, why = (item if isinstance(item, list) and len(item) == 2 else ["?", item])
            notes.append(f"not saved: {str(path)[:300]} ({str(why)[:100]})")
        more = len(result.skipped) - MAX_NOTED_SKIPS + result.skipped_more
        if more > 0:
            notes.append(f"not saved: {more} more entries")
        return Outcome(captured.root if captured else root_before, captured,
                       "; ".join(notes) or None, failure)

    def committed(self, session_id: str, outcome: Outcome) -> None:
        """The new root is the session's: the copy holds it."""
        if outcome.captured is not None:
            captured = outcome.captured
            self._cache.save(session_id, captured.index, captured.changed, captured.removed)

    def close(self) -> None:
        if self._records is not None:
            self._records.close()
