"""The `pg-shell` command line."""

from __future__ import annotations

import argparse

# `typing` is not imported at run time: `pg-shell --help` starts faster without it, and mypy
# reads the branch below as if TYPE_CHECKING were typing's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeAlias

    # What each subcommand module's register() is given: the parser's subcommands.
    Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
else:
    Commands = argparse._SubParsersAction
