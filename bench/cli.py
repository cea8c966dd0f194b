"""What `pg-shell run` costs beside the work it asks for, in one run on the
real gateway, executor daemon, Docker engine and PostgreSQL:

* `pg-shell run -s SESSION 'echo hi'`: the wall time of the whole process
  (start-up, submit, follow, exit), p50 and p90;
* `python -c pass` with the same interpreter: the cost of any Python program;
* the executor's hot end-to-end of `echo hi` in another session (submit ->
  done, polled in a tight loop over the database, as bench.executor does):
  the work the CLI asks for;
* the target: `pg-shell run` within 2 x `python -c pass` + the hot
  end-to-end (their ratio, target <= 1).

The three are interleaved, a run of each in turn. With --compare DIR, the
CLI of another checkout (`python -m executor.cli.main` from DIR: an older
commit, for a before/after) is measured in the same rounds against the same
gateway. Also `pg-shell --help` (start-up alone).

    .venv/bin/python -m bench.cli --runs 20 [--compare /tmp/old]

Needs DATABASE_URL (a superuser), a Docker engine and the sandbox image
(PG_SHELL_IMAGE). One JSON object per line on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
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
    require_dsn,
    running_executor,
    running_gateway,
)
from bench.common import percentile_interpolated as pct
from bench.executor import Tenant

PASSWORD = "correct horse"
COMMAND = "echo hi"
REPORT = Report("cli")
log, emit = REPORT.log, REPORT.emit_figure


def rpc(url: str, function: str, args: dict[str, object], token: str | None = None) -> Any:
    headers = {"Content-Type": "application/json",
               **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(f"{url}/rpc/{function}", data=json.dumps(args).encode(),
                                     headers=headers)
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def cli_env(url: str, token: str) -> dict[str, str]:
    """A user's environment: the API's address and a token, no other setting."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PG_SHELL_") and k not in ("DATABASE_URL", "PYTHONPATH")}
    return {**env, "PG_SHELL_URL": url, "PG_SHELL_TOKEN": token}


def timed(argv: list[str], env: dict[str, str], cwd: str, expect: str | None = None) -> float:
    """The wall time of one run; its stdout must be ``expect`` when given."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or (expect is not None and done.stdout != expect):
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stdout!r} {done.stderr!r}")
    return elapsed


def hot_end_to_end(tenant: Tenant, session: str) -> float:
    started = time.perf_counter()
    tenant.wait(tenant.submit(session, COMMAND))
    return time.perf_counter() - started


def figures(name: str, seconds: list[float], **extra: object) -> float:
    p50, p90 = pct(seconds, 50) * 1000, pct(seconds, 90) * 1000
    emit(f"{name}_p50", p50, "ms", runs=len(seconds), **extra)
    emit(f"{name}_p90", p90, "ms", runs=len(seconds), **extra)
    return p50


def measure(url: str, token: str, tenant: Tenant, runs: int, compare: Path | None,
            pg_shell: str) -> None:
    env = cli_env(url, token)
    here = tempfile.gettempdir()  # not the checkout: as a user runs it from anywhere
    cli_session, e2e_session = (str(rpc(url, "create_session", {"p_name": name}, token))
                                for name in ("cli", "e2e"))
    ours = [pg_shell, "run", "-s", cli_session, COMMAND]
    theirs = [sys.executable, "-m", "executor.cli.main", "run", "-s", cli_session, COMMAND]
    theirs_env = {**env, "PYTHONPATH": str(compare)}
    samples: dict[str, list[float]] = {"pass": [], "ours": [], "theirs": [], "e2e": [],
                                       "help": []}
    for index in range(runs + 3):  # three unmeasured rounds: volumes, warm containers, caches
        # Each starts from an idle executor (the previous container's removal
        # runs after its result is recorded) and a quiet engine.
        time.sleep(0.3)
        round_ = {"pass": timed([sys.executable, "-c", "pass"], env, here),
                  "help": timed([pg_shell, "--help"], env, here)}
        time.sleep(0.3)
        round_["ours"] = timed(ours, env, here, expect="hi\n")
        if compare is not None:
            time.sleep(0.3)
            round_["theirs"] = timed(theirs, theirs_env, str(compare), expect="hi\n")
        time.sleep(0.3)
        round_["e2e"] = hot_end_to_end(tenant, e2e_session)
        if index >= 3:
            for key, value in round_.items():
                samples[key].append(value)
    reference = figures("python_c_pass", samples["pass"])
    figures("pg_shell_help", samples["help"])
    end_to_end = figures("executor_end_to_end_hot", samples["e2e"], command=COMMAND,
                         note="submit -> done over the database, a tight poll")
    run = figures("pg_shell_run", samples["ours"], command=COMMAND, checkout="this")
    target = 2 * reference + end_to_end
    emit("pg_shell_run_target", target, "ms", note="2 x python -c pass + hot end-to-end (p50)")
    emit("pg_shell_run_over_target", run / target, "ratio", target="<= 1")
    if compare is not None:
        before = figures("pg_shell_run", samples["theirs"], command=COMMAND,
                         checkout=str(compare))
        emit("pg_shell_run_over_target", before / target, "ratio", checkout=str(compare))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli",
                                     description=(__doc__ or "").split("\n\n")[0])
    add_dsn_option(parser)
    add_image_option(parser)
    parser.add_argument("--runs", type=int, default=20, help="rounds measured (default 20)")
    parser.add_argument("--compare", type=Path, metavar="DIR",
                        help="also measure the CLI of the checkout in DIR")
    parser.add_argument("--pg-shell", default=str(Path(sys.executable).parent / "pg-shell"),
                        help="the entry point (default: beside this Python)")
    args = parser.parse_args()
    admin_dsn = require_dsn(parser, args)
    image = image_id(args.image)
    work = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    with migrated_database(admin_dsn, "pgshell_bench_cli") as dsn:
        user = create_user(dsn, "bench", PASSWORD, sessions=10, running=4, queued=100)
        with running_executor(dsn, image, "cli", work), running_gateway(dsn, work) as gateway:
            log(f"database {database_name(dsn)}, gateway {gateway.url}, logs in {work}")
            token = str(rpc(gateway.url, "login",
                            {"p_username": "bench", "p_password": PASSWORD})["token"])
            tenant = Tenant(dsn, user)
            measure(gateway.url, token, tenant, args.runs, args.compare, args.pg_shell)
            tenant.conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
