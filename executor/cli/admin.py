"""Operator subcommands over DATABASE_URL: the schema, users, the executor."""

from __future__ import annotations

import argparse
import getpass
import json
import secrets
import sys

from executor.cli import Commands
from executor.config import Settings
from executor.db import admin as db_admin
from executor.db import migrations, server
from executor.db.database import as_admin, one_off


def register(commands: Commands) -> None:
    db = commands.add_parser("db", help="the database schema (over DATABASE_URL)",
                             description="Manage the pg_shell schema in the database DATABASE_URL "
                                         "names.")
    db_commands = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    migrate = db_commands.add_parser(
        "migrate", help="apply pending migrations",
        description="Apply the numbered migrations in sql/migrations that the database lacks, "
                    "each in its own transaction, then sql/grants.sql if it changed. "
                    "Re-running is a no-op.")
    migrate.add_argument("--to", type=int, metavar="N", help="stop after migration number N")
    migrate.set_defaults(handler=cmd_migrate)
    status = db_commands.add_parser(
        "status", help="the server reached (primary or replica) and the migrations",
        description="Say which server DATABASE_URL reached (with a multi-host DSN: the node "
                    "that is primary now), the replicas it streams to, then the applied and "
                    "pending migrations.")
    status.set_defaults(handler=cmd_status)
    secret = db_commands.add_parser(
        "jwt-secret", help="print the JWT secret (for PostgREST's jwt-secret)",
        description="Print the secret the database signs login tokens with; "
                    "PostgREST and `pg-shell serve` verify tokens with it.")
    secret.set_defaults(handler=cmd_jwt_secret)

    user = commands.add_parser("user", help="manage users (over DATABASE_URL)",
                               description="Create users and set their quotas.")
    user_commands = user.add_subparsers(dest="user_command", metavar="ACTION", required=True)
    add = user_commands.add_parser(
        "add", help="create a user",
        description="Create a user. The password is read from --password, from stdin when it is "
                    "not a terminal, or prompted for; --generate makes one up and prints it.")
    add.add_argument("username")
    add.add_argument("--password", help="the password (visible in the process list; prefer stdin)")
    add.add_argument("--generate", action="store_true", help="generate a password and print it")
    add.set_defaults(handler=cmd_user_add)
    quota = user_commands.add_parser(
        "quota", help="show or set a user's quotas",
        description="Set any of the quotas; the others stay as they are. Prints the result.")
    quota.add_argument("username")
    quota.add_argument("--sessions", type=int, help="most sessions the user may have")
    quota.add_argument("--running", type=int, help="most commands running at once")
    quota.add_argument("--queued", type=int, help="most unfinished (queued or running) commands")
    quota.add_argument("--output-mb", type=int, metavar="MB",
                       help="most output (MiB) the user's kept commands may store; past it, "
                            "submitting fails with 429")
    quota.add_argument("--files-mb", type=int, metavar="MB",
                       help="most file bytes (MiB) the kept history of the user's sessions may "
                            "hold: every version of every file, and each directory entry; past "
                            "it, uploads and commands that add files fail")
    quota.add_argument("--tree-entries", type=int, metavar="N",
                       help="most entries one directory of a session may hold")
    quota.add_argument("--root-entries", type=int, metavar="N",
                       help="most entries (files, directories, links) a session's home may hold")
    quota.add_argument("--uploads-per-minute", type=int, metavar="N",
                       help="most uploads the user may make in a minute (429 beyond)")
    quota.add_argument("--terminal-idle-s", type=int, metavar="S",
                       help="a terminal command ends after this long without input or output")
    quota.add_argument("--terminal-max-s", type=int, metavar="S",
                       help="the longest a terminal command may run")
    quota.add_argument("--inputs-per-second", type=int, metavar="N",
                       help="most send_input calls a second to one command (429 beyond)")
    quota.add_argument("--json", action="store_true", help="print JSON")
    quota.set_defaults(handler=cmd_user_quota)

    templates = user_commands.add_parser(
        "templates", help="set the templates a user may use besides the open ones",
        description="Grant the user exactly these templates (none: only the open ones), "
                    "replacing the previous grant. Prints what the user is granted.")
    templates.add_argument("username")
    templates.add_argument("templates", nargs="*", metavar="TEMPLATE")
    templates.set_defaults(handler=cmd_user_templates)
    runtime = user_commands.add_parser(
        "runtime", help="put a user's commands on a container runtime",
        description="The container runtime the user's commands run under from their next start "
                    "on: runsc runs them on gVisor's kernel, not the host's (docs/security.md). "
                    "'default' leaves it to each executor's PG_SHELL_RUNTIME. Executors whose "
                    "engine lacks the runtime fail the user's commands, saying so.")
    runtime.add_argument("username")
    runtime.add_argument("runtime", metavar="RUNTIME", help="runc, runsc, or default")
    runtime.set_defaults(handler=cmd_user_runtime)

    executor = commands.add_parser(
        "executor", help="run the executor daemon",
        description="Claim commands from the database and run each in a fresh container. "
                    "Configured by PG_SHELL_* variables (docs/configuration.md). "
                    "SIGTERM drains: no new commands, running ones get PG_SHELL_SHUTDOWN_GRACE_S.")
    executor.set_defaults(handler=cmd_executor)


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    with one_off(settings.require_database_url(), "db migrate") as db:
        conn = db.connection()  # the runner holds its own transactions and lock
        done = migrations.migrate(conn, to=args.to, progress=lambda m: print(m, file=sys.stderr))
        for notice in conn.notices:
            print(f"warning: {notice.strip()}", file=sys.stderr)
    print(f"applied {len(done)}: {', '.join(done)}" if done
          else "nothing to apply: the schema is up to date")
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    with one_off(settings.require_database_url(), "db status") as db:
        node = server.describe(db)
        rows = migrations.status(db.connection())
    print(f"{'server':8} {node.address:32} {'primary' if node.primary else 'replica'}, "
          f"PostgreSQL {node.version}, database {node.database}")
    for replica in node.replicas:
        behind = "" if replica.behind_bytes is None else f", {replica.behind_bytes} bytes behind"
        print(f"{'replica':8} {replica.name:32} {replica.state} {replica.sync_state}{behind}")
    for row in rows:
        print(f"{row.state:8} {row.name:32} {row.applied_at or ''}")
    return 0


def cmd_jwt_secret(args: argparse.Namespace, settings: Settings) -> int:
    with as_admin(settings.require_database_url(), "db jwt-secret") as db:
        print(db_admin.jwt_secret(db))
    return 0


def cmd_user_add(args: argparse.Namespace, settings: Settings) -> int:
    if args.generate:
        password = secrets.token_urlsafe(12)
    elif args.password is not None:
        password = args.password
    elif not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.username}: ")
    with as_admin(settings.require_database_url(), "user add") as db:
        user_id = db_admin.create_user(db, args.username, password)
    shown = f" with password {password}" if args.generate else ""
    print(f"created {args.username} ({user_id}){shown}")
    return 0


def cmd_user_quota(args: argparse.Namespace, settings: Settings) -> int:
    with as_admin(settings.require_database_url(), "user quota") as db:
        row = db_admin.set_quota(db, args.username, args.sessions, args.running, args.queued,
                                 args.output_mb, args.files_mb, args.tree_entries,
                                 args.root_entries, args.uploads_per_minute,
                                 args.terminal_idle_s, args.terminal_max_s,
                                 args.inputs_per_second)
    print(json.dumps(row) if args.json else
          f"{row['username']}: sessions {row['max_sessions']}, running {row['max_running']}, "
          f"queued {row['max_queued']}, output {row['max_output_mb']} MiB, "
          f"files {row['max_files_mb']} MiB, {row['max_tree_entries']} entries a directory, "
          f"{row['max_root_entries']} a home, {row['max_uploads_per_minute']} uploads a minute, "
          f"terminals idle {row['terminal_idle_s']} s and at most {row['terminal_max_s']} s, "
          f"{row['max_inputs_per_second']} inputs a second")
    return 0


def cmd_user_templates(args: argparse.Namespace, settings: Settings) -> int:
    with as_admin(settings.require_database_url(), "user templates") as db:
        granted = db_admin.set_templates(db, args.username, args.templates)
    print(f"{args.username} may use the open templates"
          + (f" and {', '.join(granted)}" if granted else " only"))
    return 0


def cmd_user_runtime(args: argparse.Namespace, settings: Settings) -> int:
    chosen = None if args.runtime == "default" else args.runtime
    with as_admin(settings.require_database_url(), "user runtime") as db:
        db_admin.set_runtime(db, args.username, chosen)
    print(f"{args.username}'s commands run under "
          + (chosen or "each executor's default runtime (PG_SHELL_RUNTIME)"))
    return 0


def cmd_executor(args: argparse.Namespace, settings: Settings) -> int:
    from executor.daemon import run_executor  # imports docker: only when needed

    return run_executor(settings)
