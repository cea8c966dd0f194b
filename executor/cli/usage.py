"""`pg-shell usage`: per-user usage (commands, run time, output bytes) of the
commands that ended since the last report, for billing. Each report moves
its consumer's watermark in the same transaction, so reports never overlap."""

from __future__ import annotations

import argparse
import csv
import datetime
import re
import sys
from typing import Any

from executor.cli import Commands
from executor.config import Settings
from executor.db import admin as db_admin
from executor.db.database import as_admin
from executor.errors import PgShellError

_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
CSV_FIELDS = ["user_id", "username", "commands", "run_ms", "output_bytes", "from_time",
              "until_time"]


def register(commands: Commands) -> None:
    usage = commands.add_parser(
        "usage", help="per-user usage since the last report (over DATABASE_URL)",
        description="Report, per user, the commands that ended since this consumer's last report: "
                    "how many, their run time and output bytes. The report and the consumer's new "
                    "watermark are committed together, so running it again reports only what "
                    "ended since. --since bounds a consumer's first report.")
    usage.add_argument("--since", default="1d", metavar="WHEN",
                       help="for a consumer's first report: an age (30m, 12h, 1d, 2w) or an ISO "
                            "time (default 1d)")
    usage.add_argument("--consumer", default="default", metavar="NAME",
                       help="whose watermark to read and move (default 'default'); one per reader")
    usage.add_argument("--csv", action="store_true", help="print CSV")
    usage.set_defaults(handler=cmd_usage)


def parse_since(text: str, now: datetime.datetime) -> datetime.datetime:
    """An age like 1d or 12h before ``now``, or an ISO time (UTC if it names no zone)."""
    if match := _AGO.match(text.strip()):
        return now - datetime.timedelta(seconds=float(match[1]) * _UNIT_S[match[2]])
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise PgShellError(
            f"--since {text!r}: give an age (30m, 12h, 1d, 2w) or an ISO time") from exc
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def cmd_usage(args: argparse.Namespace, settings: Settings) -> int:
    since = parse_since(args.since, datetime.datetime.now(datetime.UTC))
    with as_admin(settings.require_database_url(), "usage") as db:
        rows = db_admin.usage_report(db, args.consumer, since)
    if args.csv:
        writer = csv.DictWriter(sys.stdout, CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows({**r, "from_time": _iso(r["from_time"]),
                          "until_time": _iso(r["until_time"])}
                         for r in rows)
        return 0
    print_table(rows)
    return 0


def print_table(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("no commands ended since the last report", file=sys.stderr)
        return
    print(f"usage from {_iso(rows[0]['from_time'])} until {_iso(rows[0]['until_time'])}",
          file=sys.stderr)
    print(f"{'USER':<24} {'COMMANDS':>9} {'RUN TIME (s)':>13} {'OUTPUT BYTES':>13}  USER ID")
    for r in rows:
        print(f"{r['username']:<24} {r['commands']:>9} {r['run_ms'] / 1000:>13.3f} "
              f"{r['output_bytes']:>13}  {r['user_id']}")


def _iso(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)
