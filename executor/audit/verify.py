"""Verification of the tamper-evident history, from rows alone.

Pure logic (no database): `pg-shell audit verify` feeds it rows read from
PostgreSQL, `pg-shell audit verify-export` rows read from an export file.
Each session's chain is walked in order from its start (or from the
checkpoint retention left), and the first broken link is reported with its
cause:

- ``edited``: a row no longer matches its record (``field`` names which), or a
  record no longer matches its link hash;
- ``deleted``: links are missing (a chain_seq gap, a link whose predecessor is
  gone, or links missing at the end of the chain);
- ``reordered``: links are intact but in the wrong positions;
- ``forged``: a signature that does not verify, or a key nobody registered;
- ``missing signature``: an executor's record without its signature, or a
  ``done`` result with none (failures the database settled itself are
  expected to be unsigned; so are uploads, which the database applies: their
  record states the upload, checked against the row and, with the files,
  against the roots).

Every break is reported, not only a session's first: after one, the walk
goes on from the link as it is stored. With the files (executor/audit/files.py),
the trees and blobs below each link's roots are recomputed too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from executor.audit.records import (
    DATABASE_SIGNER,
    GENESIS,
    binds_position,
    chain_hash,
    fact_fields,
    facts_of,
    sha256_hex,
)
from executor.audit.signing import signature_valid

EDITED = "edited"
DELETED = "deleted"
REORDERED = "reordered"
FORGED = "forged"
MISSING_SIGNATURE = "missing signature"
# Causes that say where a link sits rather than what it holds: one deletion
# or swap puts several links out of place, and only the first is reported.
_PLACEMENT = (DELETED, REORDERED)
_POSITION = ("chain_seq", "chain_prev")

# A fact that differs is reported under the row field it is computed from.
_ROW_FIELD = {"output_sha256": "output", "command_sha256": "command", "attempt": "attempts",
              "input_sha256": "input"}
_ABSENT = object()


@dataclass(frozen=True)
class Break:
    session_id: str
    command_id: int | None
    chain_seq: int | None
    cause: str
    detail: str
    field: str | None = None
    path: str | None = None  # a file or directory below the home (--files)

    def describe(self) -> str:
        where = f"command {self.command_id}" if self.command_id is not None else "the chain"
        seq = f" (chain_seq {self.chain_seq})" if self.chain_seq is not None else ""
        what = f"{self.cause} [{self.field}]" if self.field else self.cause
        return f"session {self.session_id}: {where}{seq}: {what}: {self.detail}"


@dataclass
class Report:
    sessions: int = 0
    links: int = 0
    breaks: list[Break] = field(default_factory=list)
    files: dict[str, int] | None = None  # what --files recomputed: {"trees": n, "blobs": n}

    @property
    def intact(self) -> bool:
        return not self.breaks

    def to_json(self) -> dict[str, Any]:
        shown = {"intact": self.intact, "sessions": self.sessions, "links": self.links,
                 "breaks": [asdict(b) for b in self.breaks]}
        return shown if self.files is None else {**shown, "files": self.files}


class FilesCheck(Protocol):
    """Recomputes the files below a session's roots (executor/audit/files.py)."""

    def check(self, session_id: str, links: list[Mapping[str, Any]]) -> list[Break]: ...
    def counted(self) -> dict[str, int]: ...


Head = tuple[int, str]  # a chain head exported earlier: (chain_seq, chain_hash)


def verify(sessions: Iterable[tuple[Mapping[str, Any], list[Mapping[str, Any]]]],
           keys: Mapping[str, str], heads: Mapping[str, Head] | None = None,
           files: FilesCheck | None = None) -> Report:
    """``sessions``: (session, links) pairs; ``keys``: key_id → public key
    (hex); ``heads``: session id → a head exported earlier, which each of
    these sessions' chains must still reach (a chain cut short at its end
    re-links to nothing, so only a head kept elsewhere shows it); ``files``:
    also recompute the trees and blobs below each link's roots."""
    report = Report()
    unseen = dict(heads or {})
    for session, links in sessions:
        report.sessions += 1
        report.links += len(links)
        sid = str(session["session_id"])
        found = verify_session(session, links, keys)
        head = unseen.pop(sid, None)
        at_head = _check_head(sid, session, links, head) if head is not None else None
        if at_head is not None and not any(
                (b.chain_seq, b.cause) == (at_head.chain_seq, at_head.cause) for b in found):
            found.append(at_head)
        if files is not None:
            found += files.check(sid, links)
        report.breaks += found
    for sid, (seq, _) in unseen.items():
        report.breaks.append(Break(sid, None, seq, DELETED,
                                   f"the exported head is at chain_seq {seq}, but the session "
                                   "has no chain any more"))
    if files is not None:
        report.files = files.counted()
    return report


def _check_head(sid: str, session: Mapping[str, Any], links: list[Mapping[str, Any]],
                head: Head) -> Break | None:
    seq, hash_ = head
    if session.get("checkpoint_seq") is not None and seq <= session["checkpoint_seq"]:
        if seq < session["checkpoint_seq"] or hash_ == session["checkpoint_hash"]:
            return None  # retention removed it, and its checkpoint vouches for what came before
    elif any(lk["chain_seq"] == seq and lk["chain_hash"] == hash_ for lk in links):
        return None
    if seq > session["head_seq"]:
        return Break(sid, None, seq, DELETED,
                     f"chain_seq {_span(session['head_seq'] + 1, seq)} missing at the end of the "
                     f"chain (the exported head is at {seq}, the chain ends at "
                     f"{session['head_seq']})")
    return Break(sid, None, seq, EDITED,
                 f"the link at chain_seq {seq} is not the one the exported head names",
                 "chain_head")


def verify_session(session: Mapping[str, Any], links: list[Mapping[str, Any]],
                   keys: Mapping[str, str]) -> list[Break]:
    """Every break of one session's chain. A link is checked on its own (its
    record, signature and facts) and against the link before it; after a
    break the walk goes on from the link as stored, so a later break is
    reported too. One change moves several links (a deletion, a swap): a
    break of position right after another is part of it and not repeated."""
    sid = str(session["session_id"])
    chained = sorted((lk for lk in links if lk["chain_seq"] is not None),
                     key=lambda lk: lk["chain_seq"])
    breaks: list[Break] = []
    start_seq, start_hash = 0, GENESIS
    if session.get("checkpoint_seq") is not None:
        found = _check_checkpoint(sid, session, keys)
        if found:
            breaks.append(found)
        start_seq, start_hash = session["checkpoint_seq"], session["checkpoint_hash"]
        kept = [lk for lk in chained if lk["chain_seq"] <= start_seq]
        for link in kept:  # pinned by a fork or replay: each checked on its own
            found = _check_record(sid, link, keys, chained) or _check_own_hash(sid, link)
            if found:
                breaks.append(found)
        missing = start_seq - session["checkpoint_removed"] - len(kept)
        if missing:
            breaks.append(Break(sid, None, start_seq, DELETED,
                                f"{missing} link(s) retention kept below the checkpoint are "
                                "missing" if missing > 0 else
                                "the checkpoint counts more links than it covers"))
        chained = [lk for lk in chained if lk["chain_seq"] > start_seq]
    expected_seq, expected_prev = start_seq + 1, start_hash
    moved = False  # the link before this one is not where it was signed
    before: Mapping[str, Any] | None = None
    for link in chained:
        seq = link["chain_seq"]
        found = None
        if seq > expected_seq:
            found = Break(sid, link["command_id"], seq, DELETED,
                          f"chain_seq {_span(expected_seq, seq - 1)} missing before this link")
        elif seq < expected_seq:
            found = Break(sid, link["command_id"], seq, REORDERED, f"chain_seq {seq} appears twice")
        own = _check_record(sid, link, keys, chained, before)
        if own is None:
            computed = chain_hash(link["chain_prev"] or "", link["result_record"])
            if link["chain_prev"] != expected_prev or computed != link["chain_hash"]:
                own = _misplaced(sid, link, computed, chained)
        placement = [b for b in (found, own) if b is not None and b.cause in _PLACEMENT]
        breaks += [b for b in (found, own) if b is not None and (
            b.cause not in _PLACEMENT or (b is placement[0] and not moved))]
        # A link moved from where it was signed may move the next one too;
        # a gap before a link that is in place says nothing of the next.
        moved = bool(placement) and (_out_of_place(link)
                                     or any(b.cause == REORDERED for b in placement))
        expected_seq, expected_prev, before = seq + 1, link["chain_hash"], link
    for link in links:
        if link["chain_seq"] is None:
            breaks.append(Break(sid, link["command_id"], None, EDITED,
                                "an ended command has no chain link", "chain_seq"))
    last = expected_seq - 1
    head_seq, head_hash = session["head_seq"], session["head_hash"]
    if last < head_seq:
        breaks.append(Break(sid, None, head_seq, DELETED,
                            f"chain_seq {_span(last + 1, head_seq)} missing at the end of the "
                            f"chain (the session's chain head is at {head_seq})"))
    elif last > head_seq or expected_prev != head_hash:
        breaks.append(Break(sid, None, last, EDITED,
                            "the chain does not end at the session's chain head", "chain_head"))
    return breaks


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


def _check_record(sid: str, link: Mapping[str, Any], keys: Mapping[str, str],
                  chained: list[Mapping[str, Any]],
                  before: Mapping[str, Any] | None = None) -> Break | None:
    cid, seq, text = link["command_id"], link["chain_seq"], link["result_record"]

    def brk(cause: str, detail: str, fld: str | None = None) -> Break:
        return Break(sid, cid, seq, cause, detail, fld)

    try:
        record = json.loads(text) if text is not None else None
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return brk(EDITED, "the result record is missing or not a JSON object", "result_record")
    signer = record.get("signer")
    if signer == DATABASE_SIGNER:
        if record.get("status") == "done":
            if link.get("upload") is None:
                return brk(MISSING_SIGNATURE,
                           "a completed ('done') result must carry its executor's signature")
            wrong = upload_problem(link["upload"], record)
            if wrong:
                return brk(EDITED, wrong, "upload")
    else:
        if not link["signature"]:
            return brk(MISSING_SIGNATURE,
                       f"the record names signer {signer!r} but has no signature")
        public_key = keys.get(signer) if isinstance(signer, str) else None
        if public_key is None:
            return brk(FORGED, f"signed by an unknown key {signer!r}")
        if not signature_valid(public_key, text, link["signature"]):
            return brk(FORGED, f"the signature does not match the record (key {signer})")
    if binds_position(record):
        moved = _check_position(sid, link, record, chained, before)
        if moved:
            return moved
    facts = facts_of(link)
    for name in fact_fields(record.get("v")):
        if name in _POSITION and binds_position(record):
            continue  # checked above: a link renumbered with the one before it is in place
        claimed = record.get(name, _ABSENT)
        if claimed is _ABSENT or claimed != facts[name] or type(claimed) is not type(facts[name]):
            shown = "nothing" if claimed is _ABSENT else json.dumps(claimed)[:80]
            return brk(EDITED,
                       f"the row's {_ROW_FIELD.get(name, name)} no longer matches the record "
                       f"({name}: record {shown}, row {json.dumps(facts[name])[:80]})",
                       _ROW_FIELD.get(name, name))
    for given in link.get("input") or []:
        data = given.get("data")
        if data is not None and sha256_hex(data) != given.get("sha256"):
            return brk(EDITED, f"input {given.get('seq')} no longer matches its hash", "input")
    chunks = link.get("chunks_sha256")
    if chunks is not None and chunks != record["output_sha256"]:
        return brk(EDITED, "the stored output chunks no longer match the record", "output_chunks")
    return None


def _check_position(sid: str, link: Mapping[str, Any], record: Mapping[str, Any],
                    chained: list[Mapping[str, Any]],
                    before: Mapping[str, Any] | None) -> Break | None:
    """A record that names its position (version 3) must sit there: a link
    re-numbered or re-linked after others were deleted or moved says so,
    whatever the rows' hashes were rewritten to. A link that still follows
    the one it was signed after (renumbered with it) is where it belongs;
    the break, if any, is where that run of links begins."""
    cid, seq = link["command_id"], link["chain_seq"]
    named_seq, named_prev = record.get("chain_seq"), record.get("chain_prev")
    if named_seq == seq and named_prev == link["chain_prev"]:
        return None
    if before is not None and _follows(record, before):
        return None
    if any(_named_seq(other) == seq for other in chained if other is not link):
        return Break(sid, cid, seq, REORDERED,
                     f"the signed record sits at chain_seq {named_seq}; the chain puts it at "
                     f"{seq}, where another record belongs")
    return Break(sid, cid, seq, DELETED,
                 f"the signed record sits at chain_seq {named_seq}, after {str(named_prev)[:16]}: "
                 "the link(s) before it were removed and the chain re-linked")


def _out_of_place(link: Mapping[str, Any]) -> bool:
    """Whether a link's record names another position than the one it holds."""
    try:
        record = json.loads(link["result_record"] or "null")
    except ValueError:
        return False
    return (isinstance(record, dict) and binds_position(record)
            and (record.get("chain_seq"), record.get("chain_prev"))
            != (link["chain_seq"], link["chain_prev"]))


def _follows(record: Mapping[str, Any], before: Mapping[str, Any]) -> bool:
    """Whether ``record`` was signed right after ``before``'s record: it
    names the position after the one ``before``'s record names, and the hash
    that record had there."""
    try:
        earlier = json.loads(before["result_record"] or "null")
    except ValueError:
        return False
    if not isinstance(earlier, dict) or not binds_position(earlier):
        return False
    seq, prev = earlier.get("chain_seq"), earlier.get("chain_prev")
    return (isinstance(seq, int) and isinstance(prev, str) and record.get("chain_seq") == seq + 1
            and record.get("chain_prev") == chain_hash(prev, before["result_record"]))


def upload_problem(upload: object, record: Mapping[str, Any]) -> str | None:
    """What is wrong with an upload the database vouches for, or None: its
    facts must be whole, and its entry's command must name its path (a
    record from before version 4 states only that)."""
    if not isinstance(upload, dict):
        return "the upload is not a JSON object"
    path, digest, size, mode = (upload.get(k) for k in ("path", "sha256", "size", "mode"))
    if not (isinstance(path, str) and path and isinstance(digest, str) and len(digest) == 64
            and isinstance(size, int) and size >= 0 and isinstance(mode, int)
            and 0 <= mode <= 0o7777):
        return f"the upload's facts are not whole: {json.dumps(upload)[:200]}"
    if record.get("command_sha256") != sha256_hex("upload " + path):
        return f"the upload's path {path[:200]!r} is not the one its history entry names"
    if record.get("exit_code") != 0 or record.get("root_after") is None:
        return "an upload that was put ends with exit code 0 and a root"
    return None


def _named_seq(link: Mapping[str, Any]) -> object:
    try:
        record = json.loads(link["result_record"] or "null")
    except ValueError:
        return None
    return record.get("chain_seq") if isinstance(record, dict) else None


def _check_own_hash(sid: str, link: Mapping[str, Any]) -> Break | None:
    if chain_hash(link["chain_prev"] or "", link["result_record"]) != link["chain_hash"]:
        return Break(sid, link["command_id"], link["chain_seq"], EDITED,
                     "the link hash does not match its record", "result_record")
    return None


def _misplaced(sid: str, link: Mapping[str, Any], computed: str,
               chained: list[Mapping[str, Any]]) -> Break:
    cid, seq = link["command_id"], link["chain_seq"]
    if computed == link["chain_hash"]:
        # The link is whole but hangs off the wrong predecessor.
        for other in chained:
            if other is not link and other["chain_hash"] == link["chain_prev"]:
                return Break(sid, cid, seq, REORDERED,
                             f"this link follows command {other['command_id']} "
                             f"(chain_seq {other['chain_seq']}), not the link before it")
        return Break(sid, cid, seq, DELETED, "the link this one follows is missing")
    for other in chained:
        fits = chain_hash(other["chain_prev"] or "", link["result_record"]) == other["chain_hash"]
        if other is not link and fits:
            return Break(sid, cid, seq, REORDERED,
                         f"this record belongs at chain_seq {other['chain_seq']}, "
                         f"where command {other['command_id']} is")
    return Break(sid, cid, seq, EDITED, "the link hash does not match its record and predecessor",
                 "result_record")


def _check_checkpoint(sid: str, session: Mapping[str, Any],
                      keys: Mapping[str, str]) -> Break | None:
    seq = session["checkpoint_seq"]
    text = str(session.get("checkpoint_record") or "")
    try:
        record = json.loads(text) if text else None
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return Break(sid, None, seq, EDITED, "the checkpoint record is missing or not JSON",
                     "checkpoint")
    signer = record.get("signer")
    if not session.get("checkpoint_signature"):
        return Break(sid, None, seq, MISSING_SIGNATURE, "the retention checkpoint is not signed")
    public_key = keys.get(signer) if isinstance(signer, str) else None
    if public_key is None:
        return Break(sid, None, seq, FORGED, f"checkpoint signed by an unknown key {signer!r}")
    if not signature_valid(public_key, text, session["checkpoint_signature"]):
        return Break(sid, None, seq, FORGED, "the checkpoint's signature does not match its record")
    expected = {"session_id": sid, "chain_seq": seq, "chain_hash": session["checkpoint_hash"],
                "removed": session["checkpoint_removed"]}
    for name, value in expected.items():
        if record.get(name) != value:
            return Break(sid, None, seq, EDITED,
                         f"the checkpoint's {name} no longer matches its record", "checkpoint")
    return None
