"""The `pg-shell` command line."""

from __future__ import annotations

import argparse
from typing import TypeAlias

# What each subcommand module's register() is given: the parser's subcommands.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
