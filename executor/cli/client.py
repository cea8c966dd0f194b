"""The headless client: tenant subcommands over the HTTP API (PG_SHELL_URL),
as the user whose token `pg-shell login` saved (or PG_SHELL_TOKEN)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from executor.api_client import ApiClient
from executor.cli import Commands
from executor.cli.follow import (
    INTERRUPTED,
    LONG_POLL_S,
    Printer,
    ending,
    exit_status,
    follow_to_end,
    one_line,
    when,
)
from executor.cli.stdin_input import piped_stdin
from executor.cli.token import load_token, save_token, token_path
from executor.client_settings import ClientSettings, load_client_settings
from executor.errors import ApiError, PgShellError

TYPE_CHECKING = False  # `typing` is not needed at run time (see executor/cli/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Iterator


class NotLoggedIn(PgShellError):
    """No token: run `pg-shell login` or set PG_SHELL_TOKEN."""


@contextlib.contextmanager
def api(settings: ClientSettings, *, anonymous: bool = False) -> Iterator[ApiClient]:
    token = None if anonymous else load_token(settings)
    if not anonymous and token is None:
        raise NotLoggedIn(f"not logged in: run `pg-shell login USERNAME` (the token is kept in "
                          f"{token_path()}) or set PG_SHELL_TOKEN")
    client = ApiClient(settings.url, token)
    try:
        yield client
    except ApiError as exc:
        if exc.status == 401 and not exc.hint:
            exc.hint = "log in again with `pg-shell login USERNAME`"
        raise
    finally:
        client.close()


def session_of(args: argparse.Namespace, settings: ClientSettings, client: ApiClient) -> str:
    """--session, else PG_SHELL_SESSION, else the most recently active session."""
    chosen = getattr(args, "session", None) or settings.session
    if chosen:
        return str(chosen)
    sessions = client.list_sessions()  # most recently active first
    if not sessions:
        raise PgShellError("you have no session yet: create one with `pg-shell new [NAME]`")
    return str(sessions[0]["id"])


# -- registration ---------------------------------------------------------------------


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps the description, each paragraph (after a blank line) on its
    own; keeps the examples' lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        import textwrap  # as argparse's own _fill_text does: only when help is shown

        # Not broken at hyphens: `pg-shell attach` stays whole.
        return "\n\n".join(textwrap.fill(" ".join(part.split()), width, initial_indent=indent,
                                         subsequent_indent=indent, break_on_hyphens=False)
                           for part in text.split("\n\n"))


def add_command(commands: Commands, name: str, summary: str, description: str,
                examples: str) -> argparse.ArgumentParser:
    """A tenant's command: it reads only the client's settings (client_settings.py)."""
    parser = commands.add_parser(name, help=summary, description=description,
                                 epilog="examples:\n" + examples, formatter_class=_HelpFormatter)
    parser.set_defaults(load_settings=load_client_settings)
    return parser


def _session_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-s", "--session", metavar="SESSION",
                        help="session id (default: PG_SHELL_SESSION, else your most "
                             "recently active session)")


def register(commands: Commands) -> None:
    _register_account(commands)
    _register_commands(commands)


def _register_account(commands: Commands) -> None:
    """Logging in, and the sessions."""
    login = add_command(commands, "login", "log in and save the token",
                        "Log in to the pg_shell API at PG_SHELL_URL and save the token in "
                        "$XDG_CONFIG_HOME/pg-shell/token (mode 0600) for the other commands. The "
                        "password is read from stdin when it is not a terminal, else prompted for.",
                        "  pg-shell login alice\n"
                        "  echo \"$PASSWORD\" | pg-shell login alice\n"
                        "  export PG_SHELL_TOKEN=$(pg-shell login alice --print-token)")
    login.add_argument("username", nargs="?", metavar="USERNAME",
                       help="your user name (default: your local login name)")
    login.add_argument("--print-token", action="store_true",
                       help="print the token on stdout instead of saving it")
    login.set_defaults(handler=cmd_login)

    sessions = add_command(commands, "sessions", "list your sessions",
                           "List your sessions, most recently active first.",
                           "  pg-shell sessions\n  pg-shell sessions --json | jq -r '.[0].id'")
    sessions.add_argument("--json", action="store_true", help="print JSON")
    sessions.set_defaults(handler=cmd_sessions)

    new = add_command(commands, "new", "create a session and print its id",
                      "Create a session (its own home directory, cwd and environment) and print "
                      "its id. Its commands get only the secrets named with --secret in their "
                      "environment (`pg-shell secret` sets them, reading each value from stdin; "
                      "stored output shows a value as ***).",
                      "  pg-shell new\n  export PG_SHELL_SESSION=$(pg-shell new build)\n"
                      "  pg-shell new --template dev build\n"
                      "  pg-shell new --secret API_TOKEN --secret DB_PASSWORD deploy")
    new.add_argument("name", nargs="?", metavar="NAME", help="a name to recognise it by")
    new.add_argument("--template", metavar="TEMPLATE",
                     help="the image it runs on (default base; `pg-shell templates` lists yours)")
    new.add_argument("--secret", action="append", dest="secrets", metavar="NAME",
                     help="one of your secrets its commands get as the environment variable NAME "
                          "(repeat for more; `pg-shell secret list` shows yours)")
    new.set_defaults(handler=cmd_new)

    templates = add_command(commands, "templates", "list the templates you may start a session on",
                            "List the templates (sandbox images) you may start a session on, "
                            "with what each has and its image.",
                            "  pg-shell templates\n  pg-shell new --template python-data")
    templates.add_argument("--json", action="store_true", help="print JSON")
    templates.set_defaults(handler=cmd_templates)


def _register_commands(commands: Commands) -> None:
    """Running commands, and what became of them."""
    run = add_command(commands, "run", "run a command and stream its output",
                      "Run COMMAND in a session and print its output as it arrives; exit with the "
                      "command's exit code. A command that fails (timeout, out of memory) or is "
                      "cancelled exits non-zero with the reason on stderr. The words of COMMAND "
                      "are joined by spaces and run by a shell in the sandbox, so quote what your "
                      "local shell would expand.\n\n"
                      "On a terminal (-t; the default when stdin and stdout are both terminals) "
                      "the command runs on a terminal of its own, the size of yours: REPLs, "
                      "prompts, editors and pagers work. Your terminal is in raw mode meanwhile "
                      "and put back as it was when the command ends: every key goes to the "
                      "program, Ctrl-C included (it interrupts the program, as in a local "
                      "terminal), and window-size changes follow. SIGTERM or SIGHUP detaches, "
                      "leaving the command running: `pg-shell attach COMMAND_ID` rejoins it, "
                      "`pg-shell cancel COMMAND_ID` stops it (from another terminal too). A "
                      "terminal command is stopped after a while without input or output.\n\n"
                      "Without a terminal (-T, or stdin or stdout not a terminal), Ctrl-C cancels "
                      "the command (exit 130), and what is piped or redirected into stdin is the "
                      "command's stdin: read whole before the command is submitted, at most 1 MiB "
                      "of UTF-8 text (upload larger or binary input with `pg-shell cp` and "
                      "redirect it in the command). A terminal, /dev/null or an empty pipe give "
                      "it no input. -n never reads stdin: for a loop that reads its own lines "
                      "from it, or a pipe whose writer keeps it open. With -t, what is piped in "
                      "is typed into the terminal, then its end-of-file character (Ctrl-D).",
                      "  pg-shell run ls -la\n  pg-shell run 'cd src && make 2>&1 | tail'\n"
                      "  pg-shell run --session 3f2c… 'echo $HOME'\n"
                      "  pg-shell run python3                  # a REPL, on a terminal\n"
                      "  printf 'a\\nb\\n' | pg-shell run 'wc -l'  # stdin is the command's\n"
                      "  while read f; do pg-shell run -n \"wc -c $f\"; done < list")
    _session_option(run)
    terminal = run.add_mutually_exclusive_group()
    terminal.add_argument("-t", "--tty", dest="tty", action="store_const", const=True,
                          default=None, help="run the command on a terminal (the default when "
                                             "stdin and stdout are terminals)")
    terminal.add_argument("-T", "--no-tty", dest="tty", action="store_const", const=False,
                          help="run it without a terminal")
    run.add_argument("-n", "--no-stdin", action="store_true",
                     help="never read stdin (otherwise a pipe or file on stdin is the "
                          "command's input)")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND...",
                     help="the command line")
    run.set_defaults(handler=cmd_run)

    attach = add_command(commands, "attach", "join a running terminal command",
                         "Join COMMAND_ID, a command running on a terminal (`pg-shell run -t`, "
                         "perhaps detached or started elsewhere): print its output so far, then "
                         "follow it live, with your keys and window size forwarded as `run -t` "
                         "does; exit with its exit code. SIGTERM or SIGHUP detaches again. The "
                         "command is looked for in SESSION first, then in your other sessions.",
                         "  pg-shell attach 42")
    _session_option(attach)
    attach.add_argument("command_id", type=int, metavar="COMMAND_ID",
                        help="a running terminal command")
    attach.set_defaults(handler=cmd_attach)

    tail = add_command(commands, "tail", "show the last commands; -f follows new ones",
                       "Show the last commands of a session with their output; with "
                       "-f, keep following: new commands and their output appear as "
                       "they run (Ctrl-C to stop).",
                       "  pg-shell tail\n  pg-shell tail -f -n 3")
    _session_option(tail)
    tail.add_argument("-n", "--lines", type=int, default=10, metavar="N",
                      help="how many of the last commands to show (default 10)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep following new commands")
    tail.set_defaults(handler=cmd_tail)

    cancel = add_command(commands, "cancel", "cancel a command",
                         "Cancel a command: a queued one is dropped, a running one is killed. "
                         "Exits 1 if it had already ended.",
                         "  pg-shell cancel 42")
    cancel.add_argument("command_id", type=int, metavar="COMMAND_ID", help="the command's id")
    cancel.set_defaults(handler=cmd_cancel)
    _register_lineage(commands)


def _register_lineage(commands: Commands) -> None:
    """A session's history, and sessions that start from it (forks, replays)."""
    fork = add_command(commands, "fork", "start a new session from after a command",
                       "Create a session whose cwd and environment are those right after "
                       "COMMAND_ID ran; print its id.",
                       "  pg-shell fork 42\n  export PG_SHELL_SESSION=$(pg-shell fork 42)")
    fork.add_argument("command_id", type=int, metavar="COMMAND_ID",
                      help="a command that has finished")
    fork.set_defaults(handler=cmd_fork)

    replay = add_command(commands, "replay", "re-run a session's commands from one on and compare",
                         "Queue SESSION's commands from START_ID on again, in order, in a new "
                         "session that starts from the state START_ID started from (the replay "
                         "run). Progress (N/M commands done) goes to stderr; at the end a table "
                         "compares each command's exit code and output with the original's "
                         "(same/different, with a short diff). Exits 0 when every command matched, "
                         "1 otherwise. --no-wait only prints the run id (the new session's id: "
                         "follow it with `pg-shell tail -f --session ID`).",
                         "  pg-shell replay 3f2c… 40\n"
                         "  pg-shell replay --json 3f2c… 40 | jq '.commands[] | "
                         "select(.same | not)'\n"
                         "  pg-shell replay --no-wait 3f2c… 40")
    replay.add_argument("session_id", metavar="SESSION", help="the session to replay")
    replay.add_argument("start_id", type=int, metavar="START_ID",
                        help="the first command to replay")
    replay.add_argument("--json", action="store_true", help="print the comparison as JSON")
    replay.add_argument("--no-wait", action="store_true",
                        help="print the replay run id and exit, without waiting or comparing")
    replay.set_defaults(handler=cmd_replay)

    history = add_command(commands, "history", "list a session's commands",
                          "List the last commands of a session, oldest first: id, status, exit "
                          "code, when, command. --json adds the output.",
                          "  pg-shell history\n"
                          "  pg-shell history --limit 100 --json | jq '.[] | .exit_code'")
    _session_option(history)
    history.add_argument("--limit", type=int, default=20, metavar="N",
                         help="how many of the last commands (1-1000, default 20)")
    history.add_argument("--json", action="store_true",
                         help="print JSON (with each command's output)")
    history.set_defaults(handler=cmd_history)


# -- handlers -------------------------------------------------------------------------


def cmd_login(args: argparse.Namespace, settings: ClientSettings) -> int:
    import getpass

    username = args.username or getpass.getuser()
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {username}: ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    with api(settings, anonymous=True) as client:
        token = client.login(username, password)
    if args.print_token:
        print(token)
    else:
        print(f"logged in as {username} (token saved in {save_token(token)})", file=sys.stderr)
    return 0


def cmd_sessions(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        rows = client.list_sessions()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no sessions: create one with `pg-shell new [NAME]`", file=sys.stderr)
    for row in rows:
        active = when(row["last_active_at"])
        print(f"{row['id']}  {active}  {row['cwd']:<20} {row['name'] or ''}".rstrip())
    return 0


def cmd_new(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        print(client.create_session(args.name, args.template, args.secrets))
    return 0


def cmd_templates(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        rows = client.list_templates()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        size = f"{row['size_bytes'] / 1e6:.0f} MB" if row["size_bytes"] else ""
        print(f"{row['name']:<16} {size:>8}  {row['description']}".rstrip())
    return 0


def cmd_run(args: argparse.Namespace, settings: ClientSettings) -> int:
    command = " ".join(args.command[1:] if args.command[:1] == ["--"] else args.command)
    if not command.strip():
        raise PgShellError("no command given: pg-shell run COMMAND...")
    terminal = args.tty if args.tty is not None else os.isatty(0) and os.isatty(1)
    # Read before anything is submitted: input too large submits nothing.
    stdin = None if terminal or args.no_stdin else piped_stdin()
    with api(settings) as client:
        session = session_of(args, settings, client)
        if terminal:
            from executor.cli.interactive import interact, local_window

            cursor, command_id = client.submit_after_cursor(session, command,
                                                            window=local_window())
            return interact(client, command_id, session, cursor, forward_stdin=not args.no_stdin)
        cursor, command_id = client.submit_after_cursor(session, command, stdin=stdin)
        printer = Printer(sys.stdout, only=command_id, client=client)
        try:
            row = follow_to_end(printer, client, session, cursor, command_id)
        except KeyboardInterrupt:
            client.cancel_command(command_id)
            print(f"pg-shell: cancelled command {command_id}", file=sys.stderr)
            return INTERRUPTED
    if row["status"] == "done":
        return exit_status(row["exit_code"])
    print(f"pg-shell: command {command_id} {ending(row)}", file=sys.stderr)
    code = row["exit_code"]
    return exit_status(code) if code else 1


def cmd_attach(args: argparse.Namespace, settings: ClientSettings) -> int:
    from executor.cli.attach import attach

    with api(settings) as client:
        return attach(client, args.command_id, args.session or settings.session)


def cmd_tail(args: argparse.Namespace, settings: ClientSettings) -> int:
    if not 1 <= args.lines <= 1000:
        raise PgShellError("-n must be between 1 and 1000")
    with api(settings) as client:
        session = session_of(args, settings, client)
        printer = Printer(sys.stdout, only=None, headers=True, client=client)
        cursor = client.change_cursor(session) if args.follow else 0
        printer.show(client.latest_output(session, 0, args.lines))
        if not args.follow:
            return 0
        try:
            while True:
                rows = client.session_changes(session, cursor, wait=LONG_POLL_S, tail=True)
                cursor = max([cursor, *(int(r["change_seq"]) for r in rows)])
                printer.show(rows)
        except KeyboardInterrupt:
            return INTERRUPTED


def cmd_cancel(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        if client.cancel_command(args.command_id):
            print(f"cancelling command {args.command_id}", file=sys.stderr)
            return 0
    print(f"pg-shell: command {args.command_id} had already ended", file=sys.stderr)
    return 1


def cmd_fork(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        print(client.fork_session(args.command_id))
    return 0


def cmd_replay(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        if args.no_wait:
            print(client.replay_session(args.session_id, args.start_id))
            return 0
        from executor.cli.replay import replay_and_compare

        return replay_and_compare(client, args.session_id, args.start_id, args.json)


def cmd_history(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        rows = client.latest_output(session_of(args, settings, client), 0, args.limit)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        code = "" if row["exit_code"] is None else row["exit_code"]
        print(f"{row['id']:>8}  {row['status']:<9} {code!s:>4}  {when(row['submitted_at'])}  "
              f"{one_line(row['command'])}")
    return 0
