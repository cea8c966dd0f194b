"""The `pg-shell executor` daemon as a subprocess, its output in a log file:
what the stack tests (tests/fixtures_stack.py) and the benchmarks (bench/)
run an executor with. No pytest here, so a benchmark imports it as is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def executor_env(dsn: str, image: str, settings: Mapping[str, str]) -> dict[str, str]:
    """The environment of an executor on ``dsn``: this one without any
    PG_SHELL_ setting, plus the image, a rootful engine allowed, and ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    env.update({"DATABASE_URL": dsn, "PG_SHELL_IMAGE": image, "PG_SHELL_ALLOW_ROOTFUL": "1",
                **settings})
    return env


class Daemon:
    """One executor process: a host of its own, as far as the database can
    tell. Its log is kept for a failure report."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def worker_id(self) -> str:
        return self.env["PG_SHELL_WORKER_ID"]

    def start(self, timeout: float = 60, **overrides: str) -> Daemon:
        """Starts it (``overrides`` added to its environment) and waits until it is ready."""
        return self.launch(**overrides).wait_for_log(" ready: ", timeout)

    def launch(self, **overrides: str) -> Daemon:
        """Starts it without waiting (several hosts start side by side); see wait_for_log."""
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "executor.cli.main", "executor"],
                                         env={**self.env, **overrides}, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=REPO)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float) -> Daemon:
        """Once ``text`` is in the log (a liveness bound: the failure shows the log)."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"executor exited {self.proc.returncode}:\n"
                                     f"{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"executor never logged {text!r}:\n{self.log()[-4000:]}")
            time.sleep(0.05)
        return self

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        """SIGTERM (the executor drains), then SIGKILL after a minute."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cpu_s(self) -> float:
        """CPU time (user + system) of the executor and its reaped children."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    def rss_kib(self) -> int:
        """VmRSS of the executor and all its descendants."""
        assert self.proc is not None
        total = 0
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                pass
        return total


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
