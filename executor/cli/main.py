"""`pg-shell`: the entry point. Each subcommand lives in its own module and
registers itself on the parser; errors end as one clear line and exit 1.

Start-up stays fast because only the chosen command's module is imported
(the modules pull in pydantic, psycopg2, docker…): `pg-shell --help`
lists the commands from COMMANDS alone. tests/cli/test_cli_startup.py keeps
COMMANDS equal to what the modules register."""

from __future__ import annotations

import argparse
import importlib
import sys

from executor.errors import ApiError, DatabaseError, PgShellError

DESCRIPTION = """\
pg_shell: a stateless, auditable, replayable command shell.
Every command is a row in PostgreSQL and runs in a fresh, locked-down container.

Settings come from the environment: DATABASE_URL, and PG_SHELL_* variables
(see docs/configuration.md)."""

# Each command → the module under executor.cli that registers it, and its summary.
COMMANDS: dict[str, tuple[str, str]] = {
    "db": ("admin", "the database schema (over DATABASE_URL)"),
    "user": ("admin", "manage users (over DATABASE_URL)"),
    "executor": ("admin", "run the executor daemon"),
    "serve": ("serve", "run the HTTP gateway and web UI"),
    "login": ("client", "log in and save the token"),
    "sessions": ("client", "list your sessions"),
    "new": ("client", "create a session and print its id"),
    "templates": ("client", "list the templates you may start a session on"),
    "secret": ("secrets", "set, list and delete your secrets, and choose a session's"),
    "run": ("client", "run a command and stream its output"),
    "attach": ("client", "join a running terminal command"),
    "tail": ("client", "show the last commands; -f follows new ones"),
    "cancel": ("client", "cancel a command"),
    "fork": ("client", "start a new session from after a command"),
    "replay": ("client", "re-run a session's commands from one on and compare"),
    "history": ("client", "list a session's commands"),
    "files": ("files", "list a session's files"),
    "cp": ("files", "copy a file out of or into a session"),
    "changes": ("files", "what a command changed in its session's files"),
    "export": ("files", "write a session's files to stdout as a tar archive"),
    "audit": ("audit", "verify or export the tamper-evident history"),
    "cleanup": ("cleanup", "run the housekeeping daemon (retention, idle volumes)"),
    "play": ("play", "play a command's output back with its original timing"),
    "usage": ("usage", "per-user usage since the last report (over DATABASE_URL)"),
    "image": ("image", "roll out and build sandbox images and templates (over DATABASE_URL "
                       "and the Docker engine)"),
}


def chosen_command(argv: list[str]) -> str | None:
    """The subcommand named in argv (the first word that is not an option)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; the chosen command's module registers its commands in full
    (all of them when `argv` is None), the others appear by name and summary."""
    parser = argparse.ArgumentParser(prog="pg-shell", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = None if argv is None else COMMANDS.get(chosen_command(argv) or "", ("", ""))[0]
    registered: set[str] = set()
    for name, (module, summary) in COMMANDS.items():
        if name in commands.choices:
            continue
        if wanted is None or module == wanted:
            if module not in registered:
                importlib.import_module(f"executor.cli.{module}").register(commands)
                registered.add(module)
        else:
            commands.add_parser(name, help=summary)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    # A tenant's command reads only the client's settings (without pydantic when they are all
    # that is set, client_settings.py) and logs nothing of its own: it sets up no logging
    # unless asked to with -v. Every other command reads all the settings, with pydantic.
    load = getattr(args, "load_settings", None)
    if load is None or args.verbose:
        import logging  # after parsing: `--help` and usage errors need none of it

        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        if load is None:
            from executor.config import load_settings

            load = load_settings
        return int(args.handler(args, load()) or 0)
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
