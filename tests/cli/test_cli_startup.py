"""`pg-shell` imports a command's module only when that command runs: the
summaries `--help` lists come from executor/cli/main.py's COMMANDS, which must
say what the modules register; `run` reaches the API without pydantic, httpx
or typing; and a misspelt setting stops the CLI with one line. (The times
themselves are bench.cli_startup's and bench.cli's, never a test's.)"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys

from executor.cli.main import COMMANDS, build_parser
from tests.fixtures_stack import REPO

HEAVY = ("pydantic", "psycopg2", "httpx", "docker", "executor.config", "executor.cli.admin",
         "typing")


def registered_commands() -> dict[str, tuple[str, str]]:
    """What each subcommand module registers: command → (module, summary)."""
    found: dict[str, tuple[str, str]] = {}
    for module in sorted({module for module, _ in COMMANDS.values()}):
        commands = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"executor.cli.{module}").register(commands)
        for action in commands._choices_actions:
            found[action.dest] = (module, str(action.help))
    return found


def test_the_listed_commands_are_those_the_modules_register() -> None:
    assert registered_commands() == COMMANDS


def test_help_imports_no_command_module_and_no_library() -> None:
    probe = ("import sys; from executor.cli.main import main\n"
             "try: main(['--help'])\nexcept SystemExit: pass\n"
             f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=REPO, check=True)
    assert done.stdout.splitlines()[-1] == "[]"
    assert "db" in done.stdout and "executor" in done.stdout


def test_a_chosen_command_is_registered_in_full() -> None:
    parser = build_parser(["db", "migrate"])
    args = parser.parse_args(["db", "migrate"])
    assert args.command == "db" and callable(args.handler)
    # The whole parser, as the tests and docs build it, knows every command fully.
    full = build_parser()
    assert callable(full.parse_args(["image", "build"]).handler)


def test_a_misspelt_setting_stops_the_cli_naming_the_closest() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    done = subprocess.run([sys.executable, "-m", "executor.cli.main", "db", "status"],
                          env={**env, "PG_SHELL_TIMEOUT": "5"}, capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 1
    assert done.stderr == ("pg-shell: unknown setting PG_SHELL_TIMEOUT: "
                           "did you mean PG_SHELL_TIMEOUT_S?\n")


# What `pg-shell run` may not import on its way to the API: it runs once per
# command a user types, and each of these costs more than the exchange with a
# gateway on the same machine.
RUN_AVOIDS = ("pydantic", "psycopg2", "httpx", "docker", "executor.config", "typing",
              "dataclasses", "logging", "http.client", "ssl")


def client_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    return {**env, "PG_SHELL_TOKEN": "t", "PG_SHELL_URL": "http://127.0.0.1:9", **settings}


def test_run_reads_its_settings_and_reaches_the_api_without_any_library() -> None:
    # Nothing listens on port 9: the command goes as far as connecting.
    probe = ("import sys; from executor.cli.main import main\n"
             "code = main(['run', '-s', 'S', 'true'])\n"
             f"print(code, sorted(m for m in {RUN_AVOIDS!r} if m in sys.modules))")
    # stdin /dev/null: a pipe on it would be read as the command's input.
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=REPO, env=client_env(), check=True, stdin=subprocess.DEVNULL)
    assert done.stdout.splitlines()[-1] == "1 []"
    assert done.stderr.startswith("pg-shell: cannot reach the pg_shell API at "
                                  "http://127.0.0.1:9: ")


def test_another_setting_beside_the_clients_has_run_validate_them_all() -> None:
    # A typo is refused as before, and an executor's setting is read (and
    # validated) with pydantic rather than ignored.
    for extra, error in (({"PG_SHELL_SESION": "S"}, "pg-shell: unknown setting "
                          "PG_SHELL_SESION: did you mean PG_SHELL_SESSION?\n"),
                         ({"PG_SHELL_TIMEOUT_S": "soon"}, "pg-shell: invalid settings: "
                          "PG_SHELL_TIMEOUT_S: Input should be a valid number, unable to parse "
                          "string as a number\n"),
                         ({"PG_SHELL_URL": "ftp://x"}, "pg-shell: invalid settings: PG_SHELL_URL: "
                          "String should match pattern '^https?://[^\\s]+$'\n")):
        done = subprocess.run([sys.executable, "-m", "executor.cli.main", "run", "true"],
                              env=client_env(**extra), capture_output=True, text=True, cwd=REPO)
        assert (done.returncode, done.stderr) == (1, error)
