"""`pg-shell audit`: verify the tamper-evident history, export it, and
verify an export without the database (executor/audit/verify.py does the checking)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from executor.audit import verify as audit
from executor.audit.files import Files
from executor.cli import Commands
from executor.config import Settings
from executor.errors import PgShellError


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "audit", help="verify or export the tamper-evident history",
        description="Every ended command is a link in its session's hash chain, and the results "
                    "executors produced are signed with their Ed25519 keys.")
    actions = parser.add_subparsers(dest="audit_command", metavar="ACTION", required=True)
    verify = actions.add_parser(
        "verify", help="check every chain and signature (over DATABASE_URL)",
        description="Recompute each session's chain and check each signature with the public keys "
                    "registered in the database (or only the --trust keys). Reports every broken "
                    "link and its cause. Uploads, which the database applies, are vouched for by "
                    "the database's records. Exit 0 when intact, 1 otherwise.")
    _common(verify)
    verify.add_argument("--files", action="store_true",
                        help="also read the trees and blobs below every recorded root and "
                             "recompute their hashes (and each upload's resulting root); reports "
                             "each mismatch with its command or upload and path")
    verify.set_defaults(handler=cmd_verify)
    head = actions.add_parser(
        "head", help="export each session's chain head, to check later with verify --head",
        description="Writes {session id: [chain_seq, chain_hash]} as JSON. Keep it away from the "
                    "database (a ticket, another host): a chain cut short at its end still links, "
                    "and only an earlier head shows the links that went missing.")
    head.add_argument("--session", metavar="S", help="only this session")
    head.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    head.set_defaults(handler=cmd_head)
    export = actions.add_parser(
        "export", help="write the history as JSON lines that verify without the database",
        description="One line per public key, per session (chain head, checkpoint) and per ended "
                    "command (record, signature, chain fields, the row fields and output the "
                    "record is checked against).")
    export.add_argument("--session", metavar="S", help="only this session")
    export.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    export.set_defaults(handler=cmd_export)
    offline = actions.add_parser(
        "verify-export", help="verify an export file; needs no database",
        description="Verify what `pg-shell audit export` wrote, with the public keys in the file "
                    "(or only the --trust keys). Exit 0 when intact, 1 otherwise.")
    offline.add_argument("file", help="the export (- for stdin)")
    _common(offline, session=False)
    offline.set_defaults(handler=cmd_verify_export)


def _common(parser: argparse.ArgumentParser, session: bool = True) -> None:
    if session:
        parser.add_argument("--session", metavar="S", help="only this session")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--trust", metavar="PUBLIC_KEY", action="append",
                        help="trust only these public keys (64 hex digits; repeatable), not the "
                             "ones the database or the file lists")
    parser.add_argument("--head", metavar="FILE",
                        help="heads exported earlier by `pg-shell audit head`: each session's "
                             "chain must still reach its head")


def _trusted(args: argparse.Namespace, listed: dict[str, str]) -> dict[str, str]:
    if not args.trust:
        return listed
    from executor.audit.signing import key_id_of

    try:
        return {key_id_of(k): k.lower() for k in args.trust}
    except ValueError as exc:
        raise PgShellError(f"--trust: not a hex public key: {exc}") from exc


def _heads(args: argparse.Namespace) -> dict[str, audit.Head] | None:
    if not args.head:
        return None
    try:
        with open(args.head, encoding="utf-8") as f:
            raw = json.load(f)
        heads = {str(sid): (int(seq), str(hash_)) for sid, (seq, hash_) in raw.items()}
    except OSError as exc:
        raise PgShellError(f"--head {args.head}: {exc.strerror}") from exc
    except (ValueError, TypeError, AttributeError) as exc:
        raise PgShellError(f"--head {args.head}: not a file `pg-shell audit head` wrote") from exc
    if getattr(args, "session", None):
        heads = {sid: h for sid, h in heads.items() if sid == args.session}
    return heads


def _keys_note(args: argparse.Namespace, source: str) -> str:
    if args.trust:
        return f"keys: only the {len(args.trust)} --trust key(s)"
    # Whoever can write the history can also register a key of their own.
    return (f"keys: as listed by the {source}, not --trust: this shows the history is "
            f"consistent, not who wrote it (pass --trust KEY to check signatures)")


def _print_report(report: audit.Report, as_json: bool, keys_note: str) -> int:
    if as_json:
        print(json.dumps({**report.to_json(), "keys": keys_note}, indent=2))
        return 0 if report.intact else 1
    print(keys_note, file=sys.stderr)
    files = ("" if report.files is None else
             f" (files: {report.files['trees']} trees, {report.files['blobs']} blobs recomputed)")
    if report.intact:
        print(f"intact: {report.links} links in {report.sessions} sessions{files}")
    else:
        broken = len({b.session_id for b in report.breaks})
        print(f"BROKEN: {len(report.breaks)} breaks in {broken} of {report.sessions} sessions "
              f"({report.links} links checked){files}")
        for found in report.breaks:
            print(f"  {found.describe()}")
    return 0 if report.intact else 1


def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    from executor.db import audit as db_audit
    from executor.db.database import as_admin

    with as_admin(settings.require_database_url(), "audit verify") as db, \
            db_audit.snapshot(db):
        keys = _trusted(args, {k["key_id"]: k["public_key"] for k in db_audit.keys(db)})
        files = Files(db_audit.StoredFiles(db)) if args.files else None
        report = audit.verify(db_audit.history(db, args.session), keys, _heads(args), files)
    return _print_report(report, args.json, _keys_note(args, "database"))


def cmd_head(args: argparse.Namespace, settings: Settings) -> int:
    from executor.db import audit as db_audit
    from executor.db.database import as_admin

    with as_admin(settings.require_database_url(), "audit head") as db:
        heads = {str(s["session_id"]): [s["head_seq"], s["head_hash"]]
                 for s in db_audit.sessions(db, args.session)}
    text = json.dumps(heads, indent=1, sort_keys=True) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    from executor.db import audit as db_audit
    from executor.db.database import as_admin

    out: TextIO = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        with as_admin(settings.require_database_url(), "audit export") as db:
            for key in db_audit.keys(db):
                _line(out, {"type": "key", **key})
            for session, links in db_audit.history(db, args.session):
                _line(out, {"type": "session", **session})
                for link in links:
                    _line(out, {"type": "link", **link})
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def _line(out: TextIO, obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj, sort_keys=True, default=str) + "\n")


Chain = tuple[dict[str, Any], list[Mapping[str, Any]]]  # a session and its links


def read_export(lines: TextIO) -> tuple[dict[str, str], list[Chain]]:
    """The keys and the (session, links) pairs of an export."""
    keys: dict[str, str] = {}
    sessions: dict[str, Chain] = {}
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            item = json.loads(text)
            kind = item.pop("type")
        except (ValueError, KeyError, AttributeError) as exc:
            raise PgShellError(f"line {number}: not an export line") from exc
        if kind == "key":
            keys[item["key_id"]] = item["public_key"]
        elif kind == "session":
            sessions.setdefault(item["session_id"], (item, []))
        elif kind == "link":
            if item["session_id"] not in sessions:
                raise PgShellError(f"line {number}: a link of session {item['session_id']} "
                                   "comes before its session line")
            sessions[item["session_id"]][1].append(item)
    return keys, list(sessions.values())


def cmd_verify_export(args: argparse.Namespace, settings: Settings) -> int:
    try:
        source: TextIO = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")
    except OSError as exc:
        raise PgShellError(f"{args.file}: {exc.strerror}") from exc
    with source:
        keys, sessions = read_export(source)
    report = audit.verify(sessions, _trusted(args, keys), _heads(args))
    return _print_report(report, args.json, _keys_note(args, "export file"))
