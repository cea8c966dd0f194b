"""`pg-shell secret`: a tenant's secrets, values the commands of the sessions
that name them get in their environment. A value is read from stdin only:
the command line shows in `ps` and lands in shell history. It is never
printed back, not even in an error."""

from __future__ import annotations

import argparse
import json
import sys

from executor.cli import Commands
from executor.cli.client import add_command, api
from executor.cli.follow import when
from executor.client_settings import ClientSettings
from executor.errors import PgShellError

MAX_VALUE_BYTES = 65536  # the most set_secret takes

SUMMARY = "set, list and delete your secrets, and choose a session's"
SECRET = """Secrets are values your commands get as environment variables (an API token, a
password) without the value being written into a command. A value is read from stdin, never
from the command line, and never shown again: the list shows names and versions only.

A session's commands get only the secrets the session names: `pg-shell new --secret NAME`, or
`pg-shell secret use SESSION NAME...` for an existing session (a fork or replay names what its
source named).

Where a command prints a value, its stored output holds *** instead; only the exact value is
masked, not a reversed or encoded form of it."""
SET = """Set secret NAME (a shell variable name: a letter or _, then up to 63 letters, digits
or _; not one the shell sets, such as PATH, HOME or PG_SHELL_*) to a value read from stdin,
never from the command line. At a terminal it is asked for twice, without echo; from a pipe or
file it is all of stdin less one trailing newline, so `echo` and `printf '%s'` give the same
value. 4 characters to 64 KiB of UTF-8 text.

Prints NAME version N, never the value. Only sessions that name the secret get it (`pg-shell
new --secret NAME`, `pg-shell secret use`). Setting it again makes a new version, which those
sessions get from their next command. Stored output shows the value as ***."""
LIST = """List your secrets: name, version, when it was set. Values are never shown (they are
set from stdin with `pg-shell secret set NAME`)."""
DELETE = """Delete secret NAME. The next command of a session that names it fails, saying so,
until it is set again or taken off the session (`pg-shell secret use`)."""
USE = """Choose which of your secrets SESSION's commands get in their environment: the NAMEs
given, and no other; no NAME: none. It replaces what the session named before, from its next
command on. Prints the names kept, one a line. Stored output shows their values as ***."""


def register(commands: Commands) -> None:
    secret = add_command(commands, "secret", SUMMARY, SECRET,
                         "  pg-shell secret set API_TOKEN   # asked for twice, without echo\n"
                         "  printf '%s' \"$TOKEN\" | pg-shell secret set API_TOKEN\n"
                         "  pg-shell new --secret API_TOKEN deploy\n"
                         "  pg-shell secret list")
    actions = secret.add_subparsers(dest="secret_command", metavar="ACTION", required=True)

    set_ = add_command(actions, "set", "set a secret to a value read from stdin", SET,
                       "  pg-shell secret set API_TOKEN          # asked for twice, without echo\n"
                       "  printf '%s' \"$TOKEN\" | pg-shell secret set API_TOKEN\n"
                       "  pg-shell secret set DEPLOY_KEY < deploy_key.pem")
    set_.add_argument("name", metavar="NAME", help="the environment variable it becomes")
    set_.set_defaults(handler=cmd_set)

    listing = add_command(actions, "list", "list your secrets' names and versions", LIST,
                          "  pg-shell secret list\n"
                          "  pg-shell secret list --json | jq -r '.[].name'")
    listing.add_argument("--json", action="store_true",
                         help="print JSON (name, version, updated_at)")
    listing.set_defaults(handler=cmd_list)

    delete = add_command(actions, "delete", "delete a secret", DELETE,
                         "  pg-shell secret delete API_TOKEN")
    delete.add_argument("name", metavar="NAME", help="the secret's name")
    delete.set_defaults(handler=cmd_delete)

    use = add_command(actions, "use", "choose the secrets a session's commands get", USE,
                      "  pg-shell secret use 3f2c… API_TOKEN DB_PASSWORD\n"
                      "  pg-shell secret use \"$PG_SHELL_SESSION\"   # none")
    use.add_argument("session_id", metavar="SESSION", help="the session's id")
    use.add_argument("names", nargs="*", metavar="NAME", help="a secret it gets (none: no secret)")
    use.set_defaults(handler=cmd_use)


# -- handlers -------------------------------------------------------------------------


def cmd_set(args: argparse.Namespace, settings: ClientSettings) -> int:
    value = prompted_value(args.name) if sys.stdin.isatty() else piped_value()
    with api(settings) as client:
        version = client.set_secret(args.name, value)
    print(f"{args.name} version {version}")
    return 0


def cmd_list(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        rows = client.list_secrets()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no secrets: set one with `pg-shell secret set NAME`", file=sys.stderr)
    width = max((len(row["name"]) for row in rows), default=0)
    for row in rows:
        print(f"{row['name']:<{width}}  {row['version']:>4}  {when(row['updated_at'])}")
    return 0


def cmd_delete(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        version = client.delete_secret(args.name)
    print(f"{args.name} version {version} deleted")
    return 0


def cmd_use(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        kept = client.set_session_secrets(args.session_id, args.names)
    if not kept:
        print(f"session {args.session_id} gets no secrets", file=sys.stderr)
    for name in kept:
        print(name)
    return 0


# -- reading a value ------------------------------------------------------------------


def prompted_value(name: str) -> str:
    """Typed at the terminal twice, without echo: a typo would otherwise go
    unseen until a command fails with the wrong value."""
    import getpass

    try:
        value = getpass.getpass(f"value of {name}: ")
        again = getpass.getpass(f"{name} again: ")
    except EOFError:
        raise PgShellError("no value given: nothing was set") from None
    if value != again:
        raise PgShellError("the two values differ: nothing was set")
    return value


def piped_value() -> str:
    """All of stdin less one trailing newline (what `echo` adds, and what a
    file's last line ends with). Refusals say what is wrong, never what was read."""
    data = sys.stdin.buffer.read(MAX_VALUE_BYTES + 2).removesuffix(b"\n")
    if len(data) > MAX_VALUE_BYTES:
        raise PgShellError("the value is larger than 64 KiB, the most a secret holds: "
                           "nothing was set")
    try:
        value = data.decode("utf-8")
    except UnicodeDecodeError:
        # `from None`: the decoding error quotes the offending byte.
        raise PgShellError("the value is not UTF-8 text: nothing was set") from None
    if "\0" in value:
        raise PgShellError("the value holds a NUL byte, which an environment variable cannot: "
                           "nothing was set")
    return value
