"""CPU time of the processes behind a keystroke, read from /proc (user +
system, in clock ticks of 1/SC_CLK_TCK s): one process (the executor, the
gateway), the PostgreSQL backends of one database, the browser. Each
figure is a whole process's time over the span measured: what it did for
anything else meanwhile is in it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from executor.db.connection import connect, query
from tests.daemon import descendants

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int, children: bool = False) -> float:
    """utime + stime of ``pid`` (all its threads, those ended too), and of
    the children it reaped if ``children``; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15 if children else 13]) * TICK_S


class DatabaseCpu:
    """The backends of one database (found in pg_stat_activity, this
    connection's own left out), counted from when the meter was made, in
    groups named by ``group(application_name)``. A backend that ends takes
    the time it spent after its last sample with it: ``ended`` says how
    many did."""

    def __init__(self, dsn: str, group: Callable[[str], str]) -> None:
        self._conn = connect(dsn)
        self._conn.autocommit = True
        self._group = group
        # Backends alive now count from here; later ones from their start.
        self._base = self._sample()
        self._last = dict(self._base)
        self._ended: dict[str, float] = {}
        self.ended = 0

    def _sample(self) -> dict[int, tuple[str, float]]:
        rows = query(self._conn, "SELECT pid, application_name FROM pg_stat_activity "
                                 "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return {int(r["pid"]): (self._group(r["application_name"] or ""),
                                process_cpu_s(int(r["pid"]))) for r in rows}

    def _since_base(self, pid: int, group: str, cpu_s: float) -> tuple[str, float]:
        return group, cpu_s - self._base.get(pid, (group, 0.0))[1]

    def totals(self) -> dict[str, float]:
        """CPU seconds per group since the meter was made."""
        now = self._sample()
        for pid in set(self._last) - set(now):
            group, spent = self._since_base(pid, *self._last[pid])
            self._ended[group] = self._ended.get(group, 0.0) + spent
            self.ended += 1
        self._last = now
        found = dict(self._ended)
        for pid, (group, cpu_s) in now.items():
            found[group] = found.get(group, 0.0) + self._since_base(pid, group, cpu_s)[1]
        return found

    def close(self) -> None:
        self._conn.close()


class CpuMeter:
    """CPU clocks (seconds by name), read together; a group that has not
    spent anything yet reads 0."""

    def __init__(self, names: list[str], *sources: Callable[[], dict[str, float]]) -> None:
        self.names = names
        self.sources = sources

    def read(self) -> dict[str, float]:
        found = {name: 0.0 for name in self.names}
        for source in self.sources:
            found.update(source())
        return found


def browser_cpu_s() -> float:
    """The Chromium processes this process started (through Playwright),
    those still running."""
    total = 0.0
    for pid in descendants(os.getpid()):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if name.startswith(("chrom", "headless_shell")):
            total += process_cpu_s(pid)
    return total
