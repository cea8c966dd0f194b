"""`pg-shell` imports a command's module only when that command runs: the
summaries `--help` lists come from executor/cli/main.py's COMMANDS, which must
say what the modules register; and a misspelt setting stops the CLI with one
line. (The start-up time itself is bench.cli_startup's, never a test's.)"""

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
