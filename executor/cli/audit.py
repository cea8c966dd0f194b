"""`pg-shell audit`: verify the tamper-evident history, export it, and
verify an export without the database (executor/audit/verify.py does the checking)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from executor.audit import verify as audit
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
                    "registered in the database (or only the --trust keys). Reports the first "
                    "broken link of each session and its cause. Exit 0 when intact, 1 otherwise.")
    _common(verify)
    verify.set_defaults(handler=cmd_verify)
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


def _trusted(args: argparse.Namespace, listed: dict[str, str]) -> dict[str, str]:
    if not args.trust:
        return listed
    from executor.audit.signing import key_id_of

    try:
        return {key_id_of(k): k.lower() for k in args.trust}
    except ValueError as exc:
        raise PgShellError(f"--trust: not a hex public key: {exc}") from exc


def _print_report(report: audit.Report, as_json: bool) -> int:
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    elif report.intact:
        print(f"intact: {report.links} links in {report.sessions} sessions")
    else:
        print(f"BROKEN: {len(report.breaks)} of {report.sessions} sessions "
              f"({report.links} links checked)")
        for found in report.breaks:
            print(f"  {found.describe()}")
    return 0 if report.intact else 1


def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    from executor.db import audit as db_audit
    from executor.db.connection import as_admin

    with as_admin(settings.require_database_url(), "audit verify") as conn:
        keys = _trusted(args, {k["key_id"]: k["public_key"] for k in db_audit.keys(conn)})
        report = audit.verify(db_audit.history(conn, args.session), keys)
    return _print_report(report, args.json)


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    from executor.db import audit as db_audit
    from executor.db.connection import as_admin

    out: TextIO = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        with as_admin(settings.require_database_url(), "audit export") as conn:
            for key in db_audit.keys(conn):
                _line(out, {"type": "key", **key})
            for session, links in db_audit.history(conn, args.session):
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
    return _print_report(audit.verify(sessions, _trusted(args, keys)), args.json)
