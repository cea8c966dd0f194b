"""The executor against a bare `docker run --rm` with the same image and the
same hardening flags, measured side by side in one run:

* end-to-end latency of `echo hi` (submit → done, polled in a tight loop)
  vs `docker run --rm ... bash -c 'echo hi'`, interleaved, p50/p90 and the
  ratio ours/reference: hot (consecutive commands of one session, which
  find their warm container; target <= 0.5) and cold (the first command of
  a new session; target <= 1.0);
* a process-heavy command (200 starts of /bin/true, then `echo hi`) in a
  hot session vs the same `docker run --rm`: the runtime's cost per process;
* dispatch latency (submitted_at → claimed_at, the database's own clock)
  with an idle executor, p50 (target <= 5 ms);
* throughput: 50 sessions (of 10 users) x 10 commands at concurrency 4 vs 4
  parallel `docker run --rm` loops doing the same 500 runs (target ratio
  >= 1.0);
* the executor's resident memory (VmRSS of it and its children) at
  concurrency 8 while busy (target <= 80 MB), and the warm containers'
  cost on the engine's side (their memory, and the engine CPU spent on
  warm containers removed unused, per 100 commands).

The network is the one difference in how the containers are made: both
have none, but ours are created with the engine's NetworkDisabled, which
`docker run` has no flag for, so the engine skips its network set-up for
them (docs/executor.md, "No network, none set up").

It makes its own database (dropped at the end), a user, and runs
`python -m executor.cli.main executor` as a subprocess. Prints one JSON
object per line on stdout; progress goes to stderr. With `--runtime runsc`
both sides run on gVisor (the executor with PG_SHELL_RUNTIME, the reference
with `docker run --runtime`): run it once per runtime to compare them.

    .venv/bin/python -m bench.executor --runs 30 [--runtime runsc]
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import (
    DEFAULT_IMAGE,
    TERMINAL,
    Report,
    add_dsn_option,
    add_image_option,
    create_user,
    database_name,
    image_id,
    migrated_database,
    remove_containers,
    remove_quota_volumes,
    require_dsn,
    tenant_connection,
)
from bench.common import (
    percentile_interpolated as pct,
)
from executor.sandbox.hardening import SANDBOX_GID, SANDBOX_UID, process_limits
from tests.daemon import Daemon, executor_env
from tests.support import call, connect_as

SANDBOX_USER = f"{SANDBOX_UID}:{SANDBOX_GID}"  # the image's sandbox user, as the executor runs it
# The executor's defaults (executor/config.py), as docker run flags.
MEMORY_MB, PIDS, CPUS, NOFILE, FSIZE_MB, TMPFS_MB = 256, 128, 1.0, 256, 64, 16
REPORT = Report("executor")
# Many short processes, one after another: what a runtime costs per start.
PROCESS_HEAVY = "for i in $(seq 200); do /bin/true; done; echo hi"
# The container runtime of both sides (--runtime).
RUNTIME = {"name": "runc"}
log, emit = REPORT.log, REPORT.emit_figure


def reference_argv(image: str, command: str) -> list[str]:
    """`docker run --rm` with the flags the executor gives every container."""
    mib = 1024 * 1024
    pids_limit, nproc = process_limits(RUNTIME["name"], PIDS)
    return [
        "docker", "run", "--rm", "--runtime", RUNTIME["name"],
        "--read-only", "--network", "none", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", "--user", SANDBOX_USER,
        "--pids-limit", str(pids_limit), *(["--ulimit", f"nproc={nproc}:{nproc}"] if nproc else []),
        "--memory", f"{MEMORY_MB}m", "--memory-swap", f"{MEMORY_MB}m",
        "--cpus", str(CPUS), "--ulimit", f"nofile={NOFILE}:{NOFILE}",
        "--ulimit", f"fsize={FSIZE_MB * mib}:{FSIZE_MB * mib}",
        "--tmpfs", f"/tmp:rw,nosuid,nodev,exec,size={TMPFS_MB}m,mode=1777",
        "--label", "pg-shell.bench=reference",
        "--entrypoint", "bash", image, "-c", command,
    ]


def reference_run(image: str, command: str = "echo hi") -> float:
    t0 = time.perf_counter()
    done = subprocess.run(reference_argv(image, command), capture_output=True, text=True,
                          check=False)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0 or done.stdout != "hi\n":
        raise RuntimeError(
            f"reference docker run failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed


class Tenant:
    """The bench user's connection, acting as PostgREST would."""

    def __init__(self, dsn: str, user_id: str, template: str | None = None) -> None:
        self.conn = tenant_connection(dsn, user_id)
        self.template = template

    def one(self, sql: str, params: object = None) -> Any:
        # A plain cursor: this is the tight loop that waits for a command.
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
            assert row is not None
            return row[0]

    def session(self) -> str:
        return str(self.one("SELECT shell_api.create_session('bench', %s)", (self.template,)))

    def submit(self, session_id: str, command: str) -> int:
        return int(self.one("SELECT shell_api.submit_command(%s, %s)", (session_id, command)))

    def status(self, command_id: int) -> str:
        return str(self.one("SELECT status FROM shell.commands WHERE id = %s", (command_id,)))

    def wait(self, command_id: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while (status := self.status(command_id)) not in TERMINAL:
            if time.monotonic() > deadline:
                raise RuntimeError(f"command {command_id} still {status} after {timeout}s")
            time.sleep(0.0005)
        if status != "done":
            raise RuntimeError(f"command {command_id} ended {status}")

    def unfinished(self, ids: list[int]) -> int:
        return int(self.one("SELECT count(*) FROM shell.commands WHERE id = ANY(%s) "
                            "AND status <> ALL(%s)",
                            (ids, list(TERMINAL))))

    def rows(self, ids: list[int]) -> list[dict[str, Any]]:
        return call(self.conn, """
            SELECT id, status, shell.output_of(c) AS output,
                   extract(epoch FROM claimed_at - submitted_at) * 1000 AS dispatch_ms,
                   extract(epoch FROM started_at - claimed_at) * 1000 AS start_ms,
                   extract(epoch FROM completed_at - started_at) * 1000 AS run_ms
            FROM shell.commands c WHERE id = ANY(%s) ORDER BY id""", (ids,))


def offer_template(dsn: str, name: str, image: str) -> None:
    """``image`` as the current image of template ``name``, open to every user."""
    admin = connect_as(dsn, "shell_admin")
    try:
        call(admin, "SELECT * FROM shell.define_template(%s, 'bench', true)", (name,))
        call(admin, "SELECT * FROM shell.promote_image(%s, %s)", (image, name))
    finally:
        admin.close()


def start_daemon(env: dict[str, str], log_path: Path, concurrency: int) -> Daemon:
    return Daemon(env, log_path).start(PG_SHELL_CONCURRENCY=str(concurrency))


# -- the measurements ----------------------------------------------------------------


def latency(tenant: Tenant, image: str, runs: int) -> None:
    log(f"latency: {runs} x ours vs {runs} x docker run, interleaved")
    session = tenant.session()
    for _ in range(3):  # warm: the session's volume, image cache, connections
        tenant.wait(tenant.submit(session, "echo hi"))
        reference_run(image)
    ours, ref, ids = [], [], []
    for i in range(runs):
        for side in ((0, 1) if i % 2 == 0 else (1, 0)):
            # Both sides start from a quiet engine (our container's removal
            # runs after the result is recorded) and an idle executor (it
            # waits on LISTEN).
            time.sleep(0.3)
            if side == 0:
                t0 = time.perf_counter()
                cid = tenant.submit(session, "echo hi")
                tenant.wait(cid)
                ours.append(time.perf_counter() - t0)
                ids.append(cid)
            else:
                ref.append(reference_run(image))
    rows = tenant.rows(ids)
    bad = [r for r in rows if r["output"] != "hi\n"]
    if bad:
        raise RuntimeError(f"unexpected output: {bad[:2]}")
    to_ms = 1000
    o50, o90, r50, r90 = (pct(ours, 50) * to_ms, pct(ours, 90) * to_ms, pct(ref, 50) * to_ms,
                          pct(ref, 90) * to_ms)
    emit("end_to_end_p50", o50, "ms", side="ours", runs=runs, command="echo hi")
    emit("end_to_end_p90", o90, "ms", side="ours", runs=runs, command="echo hi")
    emit("end_to_end_p50", r50, "ms", side="reference", runs=runs,
         command="docker run --rm ... bash -c 'echo hi'")
    emit("end_to_end_p90", r90, "ms", side="reference", runs=runs,
         command="docker run --rm ... bash -c 'echo hi'")
    emit("end_to_end_p50_ratio", o50 / r50, "ratio", ours_over="reference", target="<= 0.5",
         note="hot: consecutive commands of one session")
    emit("end_to_end_p90_ratio", o90 / r90, "ratio", ours_over="reference",
         note="hot: consecutive commands of one session")
    dispatch = [float(r["dispatch_ms"]) for r in rows]
    emit("dispatch_p50", statistics.median(dispatch), "ms", side="ours", runs=runs,
         note="submitted_at -> claimed_at, idle executor", target="<= 5")
    # Where the rest goes (informational).
    emit("claim_to_started_p50", statistics.median(float(r["start_ms"]) for r in rows), "ms",
         side="ours")
    emit("started_to_completed_p50", statistics.median(float(r["run_ms"]) for r in rows), "ms",
         side="ours")


def interleaved(runs: int, ours: Callable[[], float], reference: Callable[[], float],
                pause_s: float = 0.3) -> tuple[list[float], list[float]]:
    """``runs`` timings of each side, alternating which goes first, each
    after a pause so both start from a quiet engine."""
    timings: tuple[list[float], list[float]] = ([], [])
    for i in range(runs):
        for side in ((0, 1) if i % 2 == 0 else (1, 0)):
            time.sleep(pause_s)
            timings[side].append((ours, reference)[side]())
    return timings


def timed_command(tenant: Tenant, session: str, command: str) -> float:
    t0 = time.perf_counter()
    tenant.wait(tenant.submit(session, command))
    return time.perf_counter() - t0


def process_heavy(tenant: Tenant, image: str, runs: int) -> None:
    log(f"process-heavy: {runs} x ours vs {runs} x docker run, interleaved")
    session = tenant.session()
    tenant.wait(tenant.submit(session, "true"))
    ours, ref = interleaved(runs, lambda: timed_command(tenant, session, PROCESS_HEAVY),
                            lambda: reference_run(image, PROCESS_HEAVY))
    o50, r50 = pct(ours, 50) * 1000, pct(ref, 50) * 1000
    emit("process_heavy_p50", o50, "ms", side="ours", runs=runs, command=PROCESS_HEAVY)
    emit("process_heavy_p50", r50, "ms", side="reference", runs=runs)
    emit("process_heavy_p50_ratio", o50 / r50, "ratio", ours_over="reference",
         note="hot: 200 process starts and the command's own overhead")


def cold_latency(tenant: Tenant, image: str, runs: int) -> None:
    log(f"cold latency: {runs} first commands of new sessions vs {runs} x docker run")
    # A pause longer than a container start on a slow host: the executor
    # starts the next blank container (and the session's next one) once a
    # command ended, which must not run beside the reference's turn.
    ours, ref = interleaved(runs, lambda: timed_command(tenant, tenant.session(), "echo hi"),
                            lambda: reference_run(image), pause_s=1.0)
    o50, r50 = pct(ours, 50) * 1000, pct(ref, 50) * 1000
    emit("end_to_end_cold_p50", o50, "ms", side="ours", runs=runs,
         note="first command of a new session: no copy of its files here, so no warm "
              "container of its own (it takes the blank one started ahead)")
    emit("end_to_end_cold_p50", r50, "ms", side="reference", runs=runs)
    emit("end_to_end_cold_p50_ratio", o50 / r50, "ratio", ours_over="reference",
         target="<= 1.0")


def throughput(daemon: Daemon, tenants: list[Tenant], image: str, sessions: int,
               per_session: int, concurrency: int) -> None:
    total = sessions * per_session
    log(f"throughput: {sessions} sessions of {len(tenants)} users x {per_session} commands "
        f"at concurrency {concurrency}")
    ids = [(tenants[i % len(tenants)], tenants[i % len(tenants)].session())
           for i in range(sessions)]
    # Each session's first command makes its volume (a one-off per session);
    # do that first so both sides measure the steady state.
    for tenant, cid in [(tenant, tenant.submit(s, "true")) for tenant, s in ids]:
        tenant.wait(cid, timeout=300)

    cpu0, engine0, wasted0 = daemon.cpu_s(), engine_cpu_s(), wasted_warm(daemon)
    t0 = tenants[0].one("SELECT clock_timestamp()")
    submitted: dict[Tenant, list[int]] = {tenant: [] for tenant in tenants}
    for _ in range(per_session):
        for tenant, s in ids:
            submitted[tenant].append(tenant.submit(s, "echo hi"))
    # The end is the database's clock at the last completion, so the wait
    # can poll slowly: polling every few ms took CPU (here and in
    # PostgreSQL) from the executor it measures, on the same cores.
    while any(tenant.unfinished(cids) for tenant, cids in submitted.items()):
        time.sleep(0.2)
    ours_s = max(float(tenant.one("SELECT extract(epoch FROM max(completed_at) - %s)"
                                  " FROM shell.commands WHERE id = ANY(%s)", (t0, cids)))
                 for tenant, cids in submitted.items())
    cpu_ms = (daemon.cpu_s() - cpu0) * 1000 / total
    wasted = wasted_warm(daemon) - wasted0
    rows = [row for tenant, cids in submitted.items() for row in tenant.rows(cids)]
    failed = [r for r in rows if r["status"] != "done" or r["output"] != "hi\n"]
    if failed:
        raise RuntimeError(f"{len(failed)} commands did not print hi: {failed[:2]}")

    log(f"throughput: {concurrency} parallel docker run loops, {total} runs")
    t0 = time.perf_counter()
    per_loop = [total // concurrency + (1 if i < total % concurrency else 0)
                for i in range(concurrency)]
    engine_ours = engine_cpu_s() - engine0
    engine1 = engine_cpu_s()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda n: [reference_run(image) for _ in range(n)], per_loop))
    ref_s = time.perf_counter() - t0
    engine_per_container_ms = (engine_cpu_s() - engine1) * 1000 / total

    ours_rate, ref_rate = total / ours_s, total / ref_s
    emit("throughput", ours_rate, "commands/s", side="ours", commands=total, sessions=sessions,
         users=len(tenants), concurrency=concurrency)
    emit("throughput", ref_rate, "commands/s", side="reference", commands=total,
         concurrency=concurrency)
    emit("throughput_ratio", ours_rate / ref_rate, "ratio", ours_over="reference", target=">= 1.0")
    emit("executor_cpu_per_command", cpu_ms, "ms", side="ours",
         note="executor process + its reaped children")
    emit("engine_cpu_per_command", engine_ours * 1000 / total, "ms", side="ours",
         note="dockerd + containerd (+ shims), warm starts included")
    emit("engine_cpu_per_command", engine_per_container_ms, "ms", side="reference")
    emit("warm_wasted_per_100_commands", wasted * 100 / total, "containers", side="ours")
    emit("warm_wasted_cpu_per_100_commands", wasted * 100 / total * engine_per_container_ms, "ms",
         side="ours", note="wasted warm starts x the engine CPU of one container start")


def memory(daemon: Daemon, tenant: Tenant, concurrency: int) -> None:
    log(f"memory: VmRSS at concurrency {concurrency} while busy")
    sessions = [tenant.session() for _ in range(concurrency * 2)]
    for cid in [tenant.submit(s, "true") for s in sessions]:
        tenant.wait(cid, timeout=300)
    idle_kib = daemon.rss_kib()
    submitted = [tenant.submit(s, "echo hi; seq 1 2000; sleep 0.5") for _ in range(4)
                 for s in sessions]
    samples: list[int] = []
    busy: list[int] = []
    while tenant.unfinished(submitted):
        samples.append(daemon.rss_kib())
        busy.append(int(tenant.one("SELECT count(*) FROM shell.commands WHERE status IN "
                                   "('claimed', 'running') AND id = ANY(%s)", (submitted,))))
        time.sleep(0.1)
    emit("executor_rss_max", max(samples) / 1024, "MB", side="ours", concurrency=concurrency,
         max_running_seen=max(busy), samples=len(samples), target="<= 80",
         includes="executor + children")
    emit("executor_rss_median", statistics.median(samples) / 1024, "MB", side="ours",
         concurrency=concurrency)
    emit("executor_rss_idle", idle_kib / 1024, "MB", side="ours", concurrency=concurrency)
    warm_mb = warm_memory_mb(daemon)
    emit("warm_containers_memory", sum(warm_mb), "MB", side="ours", containers=len(warm_mb),
         note="engine side, not in executor_rss: the memory cgroups of the warm containers held")


def engine_cpu_s() -> float:
    """CPU time of the engine's processes (dockerd, containerd and its shims)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        if name in ("dockerd", "containerd") or name.startswith("containerd-shim"):
            fields = text.rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")
    return total


def wasted_warm(daemon: Daemon) -> int:
    return daemon.log_path.read_text(errors="replace").count("removed unused warm container")


def warm_memory_mb(daemon: Daemon) -> list[float]:
    # A command's container (a warm one's label too) runs until it is
    # removed, just after its completion: listed, it may be gone when its
    # memory is read. Those go within moments: list again.
    for _ in range(5):
        time.sleep(1)
        ids = subprocess.run(["docker", "ps", "-q", "--filter", "label=pg-shell.warm=1", "--filter",
                              f"label=pg-shell.worker-id={daemon.worker_id}"],
                             capture_output=True, text=True, check=True).stdout.split()
        if not ids:
            return []
        stats = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.MemUsage}}",
                                *ids], capture_output=True, text=True, check=False)
        if stats.returncode == 0:
            break
    stats.check_returncode()
    usage = stats.stdout.split("\n")
    units = {"B": 1 / 1048576, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}
    found = [re.match(r"([\d.]+)(\w+)", line) for line in usage]
    return [float(m[1]) * units.get(m[2], 1.0) for m in found if m]


# -- set-up and clean-up ----------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.executor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dsn_option(parser)
    add_image_option(parser)
    parser.add_argument("--runs", type=int, default=30, help="latency runs per side (default 30)")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--sessions-per-user", type=int, default=5,
                        help="throughput's sessions are spread over users, this many each "
                             "(default 5: a host keeps at most PG_SHELL_VOLUMES_PER_USER=8 idle "
                             "copies of one user's sessions, and one user's 50 sessions would "
                             "measure that bound's evictions)")
    parser.add_argument("--runtime", default="runc",
                        help="the container runtime of both sides: runc or runsc (default runc)")
    parser.add_argument("--template", metavar="NAME",
                        help="run the sessions on a template whose image is --image (the "
                             "executor's own stays pg-shell-sandbox:latest), e.g. a large one: "
                             "--template dev --image pg-shell-sandbox:dev")
    args = parser.parse_args()
    admin_dsn = require_dsn(parser, args)
    RUNTIME["name"] = args.runtime

    scope = f"bench-{secrets.token_hex(4)}"
    worker_id = f"bench-executor-{secrets.token_hex(4)}"
    volumes_dir = tempfile.mkdtemp(prefix="pgshell-bench-vol-", dir="/var/tmp")
    log_path = Path(tempfile.mkstemp(prefix="pgshell-bench-executor-", suffix=".log")[1])
    daemon: Daemon | None = None
    with migrated_database(admin_dsn, "pgshell_bench_exec") as dsn:
        try:
            user_id = create_user(dsn, "bench", secrets.token_hex(8), sessions=1000, running=64,
                                  queued=100000)
            user = Tenant(dsn, user_id, args.template)
            image = image_id(args.image)
            if args.template:
                offer_template(dsn, args.template, image)
            env = executor_env(dsn, image_id(DEFAULT_IMAGE) if args.template else image, {
                "PG_SHELL_WORKER_ID": worker_id, "PG_SHELL_SCOPE": scope,
                "PG_SHELL_VOLUMES_DIR": volumes_dir, "PG_SHELL_DISK_QUOTA_MB": "64",
                "PG_SHELL_RUNTIME": args.runtime})
            log(f"database {database_name(dsn)}, image {image[:19]}"
                + (f" as template {args.template}" if args.template else "")
                + f", runtime {args.runtime}"
                + f", executor log {log_path}")

            daemon = start_daemon(env, log_path, concurrency=4)
            latency(user, image, args.runs)
            cold_latency(user, image, args.runs)
            process_heavy(user, image, max(3, args.runs // 3))
            users = [user] + [
                Tenant(dsn, create_user(dsn, f"bench{n}", secrets.token_hex(8), sessions=1000,
                                        running=64, queued=100000), args.template)
                for n in range(1, -(-args.sessions // args.sessions_per_user))]
            throughput(daemon, users, image, args.sessions, args.per_session, concurrency=4)
            daemon.stop()

            daemon = start_daemon(env, log_path, concurrency=8)
            memory(daemon, user, concurrency=8)
            daemon.stop()
            user.conn.close()
        finally:
            if daemon:
                daemon.stop()
            log("cleaning up")
            remove_containers(f"pg-shell.scope={scope}", f"pg-shell.worker-id={worker_id}",
                              "pg-shell.bench=reference")
            remove_quota_volumes(volumes_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
