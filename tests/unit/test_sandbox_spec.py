"""The container's process limits per runtime (executor/sandbox/spec.py):
under runc the tenant's count is the cgroup's pids limit; under runsc it is
RLIMIT_NPROC in gVisor's kernel, and the pids limit is sized for the host
threads gVisor's sentry needs."""

from __future__ import annotations

from executor.sandbox.model import Limits
from executor.sandbox.spec import host_config_args


def limits_of(runtime: str) -> tuple[int, list[tuple[str, int, int]]]:
    args = host_config_args(Limits(pids=40), "/home/sandbox", "vol", runtime)
    return args["pids_limit"], [(u["Name"], u["Soft"], u["Hard"]) for u in args["ulimits"]]


def test_under_runc_the_pids_limit_is_the_tenants_and_there_is_no_nproc_ulimit():
    pids, ulimits = limits_of("runc")
    assert pids == 40
    assert "nproc" not in [name for name, _, _ in ulimits]


def test_under_runsc_gvisors_kernel_counts_the_processes_and_the_host_limit_is_sized_for_it():
    pids, ulimits = limits_of("runsc")
    assert ("nproc", 40, 40) in ulimits
    assert pids == 64 + 16 * 40
