"""`pg-shell secret` and `pg-shell new --secret` as a tenant runs them:
`pg-shell …` subprocesses against the real gateway over a fresh database
(tests/fixtures_stack.py), with an executor's secrets key registered the way
an executor registers it. Every invocation is checked never to print a value
it was given."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2.extensions
import pytest

from executor.secrets.key import SecretsKey
from tests.cli.test_cli import HANG, PASSWORD, UUID, Cli, one_line_error
from tests.cli.test_cli_terminal import Terminal
from tests.fixtures_stack import Gateway
from tests.support import call, connect_as, create_user, one

NAME_HINT = "(A shell variable name: a letter or _, then up to 63 letters, digits or _.)"
NO_SECRET_HINT = "(Set it first with set_secret; list_secrets shows yours.)"
MAX_VALUE = 65536  # bytes


class WatchedCli(Cli):
    """A Cli that fails the test when an invocation prints (on stdout or
    stderr) a value given to `secret set` so far, that invocation included."""

    def __init__(self, url: str, home: Path) -> None:
        super().__init__(url, home)
        self.values: set[str] = set()

    def __call__(self, *args: str, input: str = "", env: dict[str, str] | None = None,
                 timeout: float = HANG) -> subprocess.CompletedProcess[str]:
        if args[:2] == ("secret", "set") and len(input.strip()) >= 4:
            self.values.add(input.strip())
        result = super().__call__(*args, input=input, env=env, timeout=timeout)
        self.assert_unseen(result.stdout + result.stderr)
        return result

    def assert_unseen(self, printed: str) -> None:
        for value in self.values:
            assert value not in printed, f"a secret's value was printed: {printed!r}"


@pytest.fixture(scope="module")
def secrets_key(tmp_path_factory: pytest.TempPathFactory) -> SecretsKey:
    """An executor's key (RSA 3072: made once for the module)."""
    return SecretsKey.from_file(tmp_path_factory.mktemp("executor") / "secrets-key")


@pytest.fixture
def registered(db: str, secrets_key: SecretsKey) -> SecretsKey:
    """The key registered as an executor does at start-up: set_secret encrypts to it."""
    admin = connect_as(db, "postgres")
    try:
        call(admin, "SELECT shell.register_secrets_key(%s, %s)",
             (secrets_key.fingerprint, secrets_key.public_key))
    finally:
        admin.close()
    return secrets_key


@pytest.fixture
def logged_in(gateway: Gateway, db: str, tmp_path: Path) -> WatchedCli:
    create_user(db, "alice", PASSWORD)
    cli = WatchedCli(gateway.url, tmp_path)
    assert cli("login", "alice", input=PASSWORD + "\n").returncode == 0
    return cli


@pytest.fixture
def tenant(logged_in: WatchedCli, registered: SecretsKey) -> WatchedCli:
    """Logged in, with an executor's key registered (no executor runs)."""
    return logged_in


@pytest.fixture
def admin(db: str) -> Iterator[psycopg2.extensions.connection]:
    conn = connect_as(db, "postgres")
    yield conn
    conn.close()


def stored_value(admin: psycopg2.extensions.connection, key: SecretsKey, name: str) -> str:
    """The secret's value as an executor decrypts it."""
    ciphertext = one(admin, "SELECT ciphertext FROM shell.secrets WHERE name = %s", (name,))
    return key.decrypt(bytes(ciphertext))


def session_secrets(admin: psycopg2.extensions.connection, session: str) -> list[str]:
    return list(one(admin, "SELECT secrets FROM shell.sessions WHERE id = %s", (session,)))


def ok(result: subprocess.CompletedProcess[Any]) -> Any:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


# -- set ------------------------------------------------------------------------------


def test_set_reads_the_value_from_a_pipe_and_prints_only_the_name_and_version(
        tenant, registered, admin):
    # printf '%s' (no newline) and echo (one) give the same value.
    assert ok(tenant("secret", "set", "API_TOKEN", input="tok-2f9c-41d7")) == (
        "API_TOKEN version 1\n")
    assert stored_value(admin, registered, "API_TOKEN") == "tok-2f9c-41d7"
    assert ok(tenant("secret", "set", "API_TOKEN", input="tok-77ab-0e13\n")) == (
        "API_TOKEN version 2\n")
    assert stored_value(admin, registered, "API_TOKEN") == "tok-77ab-0e13"
    # Exactly one trailing newline goes; what is inside the value stays.
    assert ok(tenant("secret", "set", "PEM", input="-----line 1\nline 2\n\n")) == (
        "PEM version 1\n")
    assert stored_value(admin, registered, "PEM") == "-----line 1\nline 2\n"
    # The largest value a secret holds, with its newline.
    big = "k" * MAX_VALUE
    assert ok(tenant("secret", "set", "BIG", input=big + "\n")) == "BIG version 1\n"
    assert stored_value(admin, registered, "BIG") == big


def test_at_a_terminal_the_value_is_asked_for_twice_without_echo(tenant, registered, admin):
    value = "typed-4b1e-9d0a"
    tenant.values.add(value)
    terminal = Terminal(tenant, "secret", "set", "API_TOKEN")
    try:
        terminal.read_until("value of API_TOKEN: ")
        terminal.type(value + "\n")
        terminal.read_until("API_TOKEN again: ")
        terminal.type(value + "\n")
        assert terminal.wait() == 0
        screen = terminal.screen.decode()
    finally:
        terminal.close()
    assert screen.endswith("API_TOKEN version 1\r\n"), screen
    tenant.assert_unseen(screen)
    assert stored_value(admin, registered, "API_TOKEN") == value

    typo = "typed-4b1e-9d0b"
    tenant.values.add(typo)
    terminal = Terminal(tenant, "secret", "set", "API_TOKEN")
    try:
        terminal.read_until("value of API_TOKEN: ")
        terminal.type(value + "\n")
        terminal.read_until("API_TOKEN again: ")
        terminal.type(typo + "\n")
        assert terminal.wait() == 1
        screen = terminal.screen.decode()
    finally:
        terminal.close()
    assert screen.endswith("pg-shell: the two values differ: nothing was set\r\n"), screen
    tenant.assert_unseen(screen)
    assert one(admin, "SELECT version FROM shell.secrets WHERE name = 'API_TOKEN'") == 1


def test_refusals_say_what_is_wrong_and_never_show_the_value(tenant, admin):
    assert one_line_error(tenant("secret", "set", "1BAD", input="val-6c2e-18aa")) == (
        f"pg-shell: not a secret name: 1BAD [22023] {NAME_HINT}")
    assert one_line_error(tenant("secret", "set", "PATH", input="val-6c2e-18aa")) == (
        "pg-shell: secret name PATH belongs to the shell [22023] "
        "(Choose another name: the shell or the session sets this variable.)")
    too_short = ("pg-shell: a secret's value must be at least 4 characters [22023] (Its value is "
                 "masked wherever it appears in output; a shorter one would mask ordinary text.)")
    assert one_line_error(tenant("secret", "set", "SHORT", input="abc\n")) == too_short
    assert one_line_error(tenant("secret", "set", "SHORT", input="")) == too_short
    # Refused before anything is sent.
    assert one_line_error(tenant("secret", "set", "HUGE", input="h" * (MAX_VALUE + 1))) == (
        "pg-shell: the value is larger than 64 KiB, the most a secret holds: nothing was set")
    assert one_line_error(tenant("secret", "set", "NUL", input="nul-\0-5e7f")) == (
        "pg-shell: the value holds a NUL byte, which an environment variable cannot: "
        "nothing was set")
    binary = tenant.raw("secret", "set", "BINARY", input=b"bin-\xff\xfe-3a9d")
    assert (binary.returncode, binary.stdout, binary.stderr) == (
        1, b"", b"pg-shell: the value is not UTF-8 text: nothing was set\n")
    assert one_line_error(tenant("secret", "delete", "NOPE")) == (
        "pg-shell: no secret NOPE [22023] (list_secrets shows yours.)")
    assert one(admin, "SELECT count(*) FROM shell.secrets") == 0


def test_without_an_executors_key_nothing_can_be_set(logged_in, admin):
    assert one_line_error(logged_in("secret", "set", "API_TOKEN", input="tok-0b3d-77c1")) == (
        "pg-shell: no executor has registered a key to encrypt secrets to [55000] "
        "(An administrator starts an executor with PG_SHELL_SECRETS_KEY_FILE set.)")
    assert one(admin, "SELECT count(*) FROM shell.secrets") == 0


# -- list and delete ------------------------------------------------------------------


def test_list_shows_names_and_versions_and_delete_takes_one_off(tenant):
    listed = tenant("secret", "list")
    assert (listed.returncode, listed.stdout, listed.stderr) == (
        0, "", "no secrets: set one with `pg-shell secret set NAME`\n")
    ok(tenant("secret", "set", "DB_PASSWORD", input="pw-5a61-c3f0\n"))
    ok(tenant("secret", "set", "API_TOKEN", input="tok-1e8b-94d2\n"))
    ok(tenant("secret", "set", "API_TOKEN", input="tok-1e8b-94d3\n"))
    table = ok(tenant("secret", "list")).splitlines()
    assert [line.split()[:2] for line in table] == [["API_TOKEN", "2"], ["DB_PASSWORD", "1"]]
    assert all(re.fullmatch(r"\S+ +\d+  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line) for line in table)
    rows = json.loads(ok(tenant("secret", "list", "--json")))
    assert [(r["name"], r["version"]) for r in rows] == [("API_TOKEN", 2), ("DB_PASSWORD", 1)]
    assert all(set(r) == {"name", "version", "updated_at"} for r in rows)

    assert ok(tenant("secret", "delete", "API_TOKEN")) == "API_TOKEN version 2 deleted\n"
    assert [r["name"] for r in json.loads(ok(tenant("secret", "list", "--json")))] == [
        "DB_PASSWORD"]
    assert one_line_error(tenant("secret", "delete", "API_TOKEN")) == (
        "pg-shell: no secret API_TOKEN [22023] (list_secrets shows yours.)")
    # Set again, it never takes a version it had before.
    assert ok(tenant("secret", "set", "API_TOKEN", input="tok-1e8b-94d4\n")) == (
        "API_TOKEN version 3\n")


# -- sessions -------------------------------------------------------------------------


def test_a_session_gets_the_secrets_it_names_and_use_changes_them(tenant, admin):
    ok(tenant("secret", "set", "B_TOKEN", input="b-tok-3f01-aa2c\n"))
    ok(tenant("secret", "set", "A_TOKEN", input="a-tok-8e44-0b7d\n"))
    session = ok(tenant("new", "--secret", "B_TOKEN", "--secret", "A_TOKEN", "deploy")).strip()
    assert UUID.match(session)
    assert session_secrets(admin, session) == ["A_TOKEN", "B_TOKEN"]
    plain = ok(tenant("new")).strip()
    assert session_secrets(admin, plain) == []

    assert ok(tenant("secret", "use", plain, "B_TOKEN")) == "B_TOKEN\n"
    assert session_secrets(admin, plain) == ["B_TOKEN"]
    cleared = tenant("secret", "use", session)
    assert (cleared.returncode, cleared.stdout, cleared.stderr) == (
        0, "", f"session {session} gets no secrets\n")
    assert session_secrets(admin, session) == []

    # A secret not set is refused, and nothing changes.
    assert one_line_error(tenant("new", "--secret", "MISSING")) == (
        f"pg-shell: no secret MISSING [22023] {NO_SECRET_HINT}")
    assert one_line_error(tenant("secret", "use", plain, "B_TOKEN", "MISSING")) == (
        f"pg-shell: no secret MISSING [22023] {NO_SECRET_HINT}")
    assert session_secrets(admin, plain) == ["B_TOKEN"]
    assert one(admin, "SELECT count(*) FROM shell.sessions") == 2
    # A name is sent as it is: a comma does not make it two.
    assert one_line_error(tenant("secret", "use", plain, "A_TOKEN,B_TOKEN")) == (
        f"pg-shell: not a secret name: A_TOKEN,B_TOKEN [22023] {NAME_HINT}")
    assert one_line_error(
        tenant("secret", "use", "00000000-0000-0000-0000-000000000000", "B_TOKEN")).startswith(
        "pg-shell: session not found [22023]")


# -- help -----------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["set", "list", "delete", "use"])
def test_every_secret_action_explains_itself(logged_in, action):
    shown = ok(logged_in("secret", action, "--help"))
    assert shown.startswith(f"usage: pg-shell secret {action}")
    assert f"examples:\n  pg-shell secret {action}" in shown


def test_help_says_values_come_from_stdin_and_are_never_shown(logged_in):
    group = " ".join(ok(logged_in("secret", "--help")).split())
    for said in ("read from stdin, never from the command line", "never shown again",
                 "get only the secrets the session names", "holds *** instead",
                 "set", "list", "delete", "use"):
        assert said in group, said
    setting = " ".join(ok(logged_in("secret", "set", "--help")).split())
    for said in ("read from stdin", "asked for twice, without echo",
                 "less one trailing newline", "never the value", "as ***"):
        assert said in setting, said
    assert "--secret NAME" in ok(logged_in("new", "--help"))
