"""The workspace (a session's files in PostgreSQL), measured against
references in the same run:

(a) `echo hi` end to end in a session whose home holds FILES files of SIZE
    in all (default 5,000 / 100 MB; the issue's other size is --files 50000
    --size-mb 500), against the same in an empty home, interleaved, each
    after a pause: p50 of each and the ratio (target <= 1.10), the
    executor's peak RSS meanwhile (target <= 150 MB) and the size of the
    host's index of that home;
(b) the extra cost of a command that rewrites one 1 MB file in that home:
    p50 of `head -c 1M /dev/urandom > f` minus p50 of `echo hi` there,
    by turns, each after a pause (target <= 30 ms);
(c) the first command on a host that has never seen that session (a fork of
    it: same files, never restored anywhere) against a bare `docker run`
    that extracts the same tree from a tar on stdin into a fresh volume
    (target ratio <= 1.5).

bench.executor's end-to-end ratio is the fourth figure of the issue; run it
beside this one. It makes its own database (dropped at the end), a user,
and runs `python -m executor.cli.main executor` as a subprocess. One JSON
object per line on stdout; progress on stderr.

    .venv/bin/python -m bench.workspace --runs 20
"""

from __future__ import annotations

import argparse
import io
import os
import secrets
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from bench.common import (
    Report,
    add_dsn_option,
    add_image_option,
    create_user,
    database_name,
    image_id,
    migrated_database,
    peak_during,
    remove_containers,
    remove_quota_volumes,
    require_dsn,
)
from bench.common import (
    percentile_interpolated as pct,
)
from bench.executor import Tenant, reference_argv
from executor.db.connection import connect
from executor.sandbox.volumes import INDEX_SUFFIX, volume_name
from tests.daemon import Daemon, executor_env
from tests.support import call

REPORT = Report("workspace")
log, emit = REPORT.log, REPORT.emit_figure
MS = 1000
FILL_BYTES = 100 * 2**20
# Before each command of (a) and (b): longer than a warm start on a slow host,
# so that every command is timed as typed after a pause (one right after
# another waits for, or runs beside, the start of a container that the one
# before set off, and a p50 over a mix of both is noise).
PAUSE_S = 1.0


def populate(first: int, count: int, size: int) -> str:
    """A command that adds files ``first`` .. ``first + count - 1`` of ``size``
    bytes each, 100 to a directory."""
    return ("python3 -c 'import os\n"
            f"for i in range({first}, {first + count}):\n"
            "    d = \"data/%03d\" % (i // 100)\n"
            "    os.makedirs(d, exist_ok=True)\n"
            f"    open(\"%s/f%05d\" % (d, i), \"wb\").write(os.urandom({size}))'")


def settle(dsn: str) -> None:
    """The fill's writes reach the disk before anything is timed (PostgreSQL's
    checkpoint, then the host's dirty pages): at 500 MB, their flush ran
    beside the first figures and put some runs' commits behind it."""
    log("flushing the fill's writes (CHECKPOINT, sync)")
    with closing(connect(dsn)) as conn:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CHECKPOINT")
    os.sync()


def timed(tenant: Tenant, session: str, command: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    cid = tenant.submit(session, command)
    tenant.wait(cid, timeout=600)
    return time.perf_counter() - t0, cid


def big_vs_empty(tenant: Tenant, big: str, empty: str, runs: int) -> None:
    log(f"(a) {runs} x echo hi in the full home vs the empty one, interleaved")
    sides: dict[str, list[float]] = {"full": [], "empty": []}
    for i in range(runs):
        for name in (("full", "empty") if i % 2 == 0 else ("empty", "full")):
            time.sleep(PAUSE_S)
            sides[name].append(timed(tenant, big if name == "full" else empty, "echo hi")[0])
    full, bare = pct(sides["full"], 50) * MS, pct(sides["empty"], 50) * MS
    emit("echo_full_home_p50", full, "ms", side="ours")
    emit("echo_empty_home_p50", bare, "ms", side="reference")
    emit("echo_full_over_empty_p50_ratio", full / bare, "ratio", target="<= 1.10")


def one_file_changed(tenant: Tenant, big: str, runs: int) -> None:
    log(f"(b) {runs} x a 1 MB file rewritten vs echo hi, in the full home")
    changed: list[float] = []
    plain: list[float] = []
    sides = [("head -c 1048576 /dev/urandom > one-mb", changed), ("echo hi", plain)]
    for i in range(runs):
        for command, times in sides if i % 2 == 0 else sides[::-1]:
            time.sleep(PAUSE_S)
            times.append(timed(tenant, big, command)[0])
    c50, p50 = pct(changed, 50) * MS, pct(plain, 50) * MS
    emit("one_mb_file_changed_p50", c50, "ms", side="ours")
    emit("echo_hi_p50", p50, "ms", side="reference")
    emit("one_mb_file_extra_p50", c50 - p50, "ms", target="<= 30")


def first_on_a_new_host(tenant: Tenant, image: str, last_command: int, session: str,
                        runs: int) -> None:
    log(f"(c) {runs} x first command in a never-seen fork vs docker run extracting the same tar")
    archive = tree_tar(tenant, session, last_command)
    ours, ref = [], []
    for _ in range(runs):
        time.sleep(0.3)
        fork = str(tenant.one("SELECT shell_api.fork_session(%s)", (last_command,)))
        ours.append(timed(tenant, fork, "echo hi")[0])
        time.sleep(0.3)
        ref.append(reference_extract(image, archive))
    o50, r50 = pct(ours, 50) * MS, pct(ref, 50) * MS
    emit("first_command_new_host_p50", o50, "ms", side="ours",
         tar_mb=round(len(archive) / 2**20, 1))
    emit("tar_into_fresh_volume_p50", r50, "ms", side="reference",
         command="docker run --rm -i -v NEW:/home/sandbox ... tar -x")
    emit("first_command_new_host_p50_ratio", o50 / r50, "ratio", target="<= 1.5")


def tree_tar(tenant: Tenant, session: str, command: int) -> bytes:
    """The session's tree right after ``command`` as a tar, read through the tenant API."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for row in listing(tenant, session, command):
            info = tarfile.TarInfo(row["path"])
            info.mode = row["mode"]
            if row["kind"] == "dir":
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            elif row["kind"] == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, row["target"]
                archive.addfile(info)
            else:
                data = bytes(tenant.one("SELECT shell_api.read_file(%s, %s, %s)",
                                              (session, row["path"], command)))
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def listing(tenant: Tenant, session: str, command: int) -> Iterator[dict[str, Any]]:
    """Every entry of the tree, a page at a time."""
    after = None
    while True:
        rows = call(tenant.conn, "SELECT * FROM shell_api.session_files(%s, %s, %s, 1000)",
                    (session, command, after))
        yield from rows
        if len(rows) < 1000:
            return
        after = rows[-1]["path"]


def reference_extract(image: str, archive: bytes) -> float:
    volume = f"pgshell-bench-ref-{secrets.token_hex(4)}"
    argv = reference_argv(image, "tar -x -C /home/sandbox")
    argv[3:3] = ["-i", "-v", f"{volume}:/home/sandbox"]  # after `docker run --rm`
    try:
        t0 = time.perf_counter()
        done = subprocess.run(argv, input=archive, capture_output=True, check=False)
        elapsed = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"reference extract failed: {done.stderr.decode(errors='replace')}")
        return elapsed
    finally:
        subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workspace", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dsn_option(parser)
    add_image_option(parser)
    parser.add_argument("--runs", type=int, default=20,
                        help="runs per side of each figure (default 20)")
    parser.add_argument("--files", type=int, default=5000,
                        help="files in the full home (default 5000)")
    parser.add_argument("--size-mb", type=int, default=100, help="their total size (default 100)")
    args = parser.parse_args()
    admin_dsn = require_dsn(parser, args)

    scope = f"bench-{secrets.token_hex(4)}"
    worker_id = f"bench-workspace-{secrets.token_hex(4)}"
    volumes_dir = tempfile.mkdtemp(prefix="pgshell-bench-vol-", dir="/var/tmp")
    log_path = Path(tempfile.mkstemp(prefix="pgshell-bench-workspace-", suffix=".log")[1])
    daemon: Daemon | None = None
    with migrated_database(admin_dsn, "pgshell_bench_ws") as dsn:
        try:
            user_id = create_user(dsn, "bench", secrets.token_hex(8), sessions=1000, running=64,
                                  queued=100000)
            tenant = Tenant(dsn, user_id)
            image = image_id(args.image)
            env = executor_env(dsn, image, {
                "PG_SHELL_WORKER_ID": worker_id, "PG_SHELL_SCOPE": scope,
                "PG_SHELL_VOLUMES_DIR": volumes_dir,
                "PG_SHELL_DISK_QUOTA_MB": str(max(256, args.size_mb * 2)),
                "PG_SHELL_TIMEOUT_S": "600"})
            log(f"database {database_name(dsn)}, image {image[:19]}, executor log {log_path}")
            daemon = Daemon(env, log_path).start(timeout=60)
            big, empty = tenant.session(), tenant.session()
            log(f"filling a home with {args.files} files, {args.size_mb} MB")
            assert daemon.proc is not None
            pid, size = daemon.proc.pid, args.size_mb * 2**20 // args.files
            # At most 5,000 files or 100 MB a command: within what one capture may read.
            step = max(1, min(5000, FILL_BYTES // max(1, size)))
            commands = [populate(first, min(step, args.files - first), size)
                        for first in range(0, args.files, step)]
            filled = 0

            def fill() -> None:
                nonlocal filled
                for command in commands:
                    filled = timed(tenant, big, command)[1]

            peak, _before, seconds = peak_during(pid, fill)
            emit("capture_full_home_once", seconds * MS, "ms", side="ours",
                 note=f"{args.files} new files, {args.size_mb} MB, in {len(commands)} commands")
            emit("executor_peak_rss_filling", peak / 1e6, "MB",
                 note="every file new: read, hashed and stored")
            settle(dsn)
            for session in (big, empty):  # warm both
                timed(tenant, session, "echo hi")
            peak, _before, _seconds = peak_during(
                pid, lambda: big_vs_empty(tenant, big, empty, args.runs))
            emit("executor_peak_rss_echo_full_home", peak / 1e6, "MB", target="<= 150")
            index = Path(volumes_dir) / f"{volume_name(big)}{INDEX_SUFFIX}"
            emit("host_index_bytes", index.stat().st_size, "bytes", files=args.files)
            one_file_changed(tenant, big, args.runs)
            first_on_a_new_host(tenant, image, filled, big, max(3, args.runs // 4))
            tenant.conn.close()
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
