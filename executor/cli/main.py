"""`pg-shell`: the entry point. Each subcommand lives in its own module and
registers itself on the parser; errors end as one clear line and exit 1."""

from __future__ import annotations

import argparse
import logging
import sys

from executor.cli import admin, audit, cleanup, client, files, image, play, serve, usage
from executor.config import load_settings
from executor.errors import ApiError, DatabaseError, PgShellError

DESCRIPTION = """\
pg_shell: a stateless, auditable, replayable command shell.
Every command is a row in PostgreSQL and runs in a fresh, locked-down container.

Settings come from the environment: DATABASE_URL, and PG_SHELL_* variables
(see README.md, "Configuration")."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pg-shell", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    admin.register(commands)
    serve.register(commands)
    client.register(commands)
    files.register(commands)
    audit.register(commands)
    cleanup.register(commands)
    play.register(commands)
    usage.register(commands)
    image.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # httpx logs every request at INFO: only with -v, so client errors stay one line.
    logging.getLogger("httpx").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    try:
        return int(args.handler(args, load_settings()) or 0)
    except DatabaseError as exc:
        code = f" [{exc.sqlstate}]" if exc.sqlstate else ""
        hint = f" ({exc.hint})" if exc.hint else ""
        print(f"pg-shell: {exc}{code}{hint}", file=sys.stderr)
    except ApiError as exc:
        code = f" [{exc.code}]" if exc.code else ""
        hint = f" ({exc.hint})" if exc.hint else ""
        print(f"pg-shell: {exc}{code}{hint}", file=sys.stderr)
    except PgShellError as exc:
        print(f"pg-shell: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
