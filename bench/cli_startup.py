"""Start-up time of the CLI: `pg-shell --help` against the reference
`python -c pass` (the same interpreter), each the median of --runs runs, and
their ratio (target at most 2: the CLI imports a command's module only when
that command runs). `pg-shell db --help` shows the cost of one command's module.

    .venv/bin/python -m bench.cli_startup --runs 30

Prints one JSON object per line on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Report

TARGET_RATIO = 2.0
REPORT = Report("cli_startup")


def median_seconds(argv: list[str], runs: int, cwd: str) -> float:
    """The median wall time of `runs` runs, after one unmeasured warm-up run."""
    times = []
    for index in range(runs + 1):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd,
                       check=True)
        if index:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per command (default 30)")
    parser.add_argument("--pg-shell", default=str(Path(sys.executable).parent / "pg-shell"),
                        help="the entry point (default: beside this Python)")
    args = parser.parse_args()
    env_cwd = tempfile.gettempdir()  # not the checkout: as a user runs it from anywhere
    REPORT.log(f"{args.runs} runs each of python -c pass, pg-shell --help, pg-shell db --help")
    reference = median_seconds([sys.executable, "-c", "pass"], args.runs, env_cwd)
    ours = median_seconds([args.pg_shell, "--help"], args.runs, env_cwd)
    one_command = median_seconds([args.pg_shell, "db", "--help"], args.runs, env_cwd)
    extra = {"runs": args.runs}
    REPORT.emit_figure("python_c_pass", reference * 1000, "ms", **extra)
    REPORT.emit_figure("pg_shell_help", ours * 1000, "ms", **extra)
    REPORT.emit_figure("pg_shell_db_help", one_command * 1000, "ms", **extra)
    REPORT.emit_figure("help_vs_python_ratio", ours / reference, "x", target=TARGET_RATIO,
                       **extra)


if __name__ == "__main__":
    main()
