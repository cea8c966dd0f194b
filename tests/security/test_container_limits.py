"""Container limits a tenant attacks from inside a command, end to end
(the real `pg-shell executor` daemon, the real sandbox image and engine):
io_uring is refused by the seccomp profile, no core dump is ever written,
/dev/shm is sized like /tmp and held to the memory limit, and the files a command
creates belong to no account of the host."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import subprocess
from pathlib import Path

import pytest

from executor.sandbox.hardening import SANDBOX_GID, SANDBOX_UID, seccomp_profile
from tests.conftest import require
from tests.security.conftest import ok

MiB = 1024 * 1024

IO_URING_PROBE = r"""python3 - <<'PY'
import ctypes, platform
# The generic syscall table numbers, the same on x86_64 and aarch64.
numbers = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}
assert platform.machine() in ("x86_64", "aarch64"), platform.machine()
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
args = {"io_uring_setup": (8, params), "io_uring_enter": (0, 1, 0, 0, None, 0),
        "io_uring_register": (0, 0, None, 0)}
for name, nr in numbers.items():
    ret = libc.syscall(nr, *args[name])
    print(f"{name}={ret} errno={ctypes.get_errno()}")
print("getpid-ok=" + str(libc.syscall(39 if platform.machine() == "x86_64" else 172) > 0))
PY
grep Seccomp: /proc/self/status"""


def test_io_uring_is_refused_while_other_system_calls_work(daemon, shell):
    row = shell.run(IO_URING_PROBE)
    assert (row["status"], row["exit_code"]) == ("done", 0), row["output"]
    out = row["output"]
    for name in ("io_uring_setup", "io_uring_enter", "io_uring_register"):
        assert f"{name}=-1 errno=1\n" in out, out  # EPERM, from the filter
    assert "getpid-ok=True" in out and re.search(r"Seccomp:\s+2", out), out



def test_gvisors_profile_differs_only_where_its_filter_reads_the_profile_otherwise():
    runc, runsc = json.loads(seccomp_profile()), json.loads(seccomp_profile("runsc"))

    def names(profile: dict) -> set[str]:
        return {n for r in profile["syscalls"] for n in r["names"]}

    def allowed(profile: dict) -> set[str]:
        return {n for r in profile["syscalls"] if r["action"] == "SCMP_ACT_ALLOW"
                and not r.get("includes") and not r.get("excludes") for n in r["names"]}

    assert {k: v for k, v in runc.items() if k != "syscalls"} == \
        {k: v for k, v in runsc.items() if k != "syscalls"}
    assert names(runsc) - names(runc) == {"pselect"}
    assert allowed(runsc) - allowed(runc) == {"clone3", "pselect"}
    assert not allowed(runsc) & {"io_uring_setup", "io_uring_enter", "io_uring_register"}


def test_the_shipped_profile_is_the_engines_default_minus_io_uring():
    profile = json.loads(seccomp_profile())
    allowed = {n for r in profile["syscalls"] if r["action"] == "SCMP_ACT_ALLOW"
               for n in r["names"]}
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    assert not allowed & {"io_uring_setup", "io_uring_enter", "io_uring_register"}
    assert {"read", "write", "clone", "execve", "openat"} <= allowed
    ops = Path(__file__).resolve().parents[2] / "ops" / "seccomp-profile"
    done = subprocess.run([str(ops), "--check"], capture_output=True, text=True, timeout=60)
    # 2: the engine's source package (the default profile to compare with) is not installed.
    require(done.returncode != 2, f"the engine's default seccomp profile ({done.stderr.strip()})")
    assert done.returncode == 0, done.stderr


def test_no_core_dump_is_written_and_the_limit_cannot_be_raised(daemon, shell):
    row = shell.run(
        "echo hard=$(ulimit -Hc) soft=$(ulimit -Sc); (ulimit -c unlimited) 2>/dev/null;"
        " echo raise=$?; python3 -c 'import ctypes; ctypes.string_at(0)'; echo crashed=$?;"
        " echo cores=$(ls -A | grep -c core)")
    assert row["status"] == "done", row
    out = row["output"]
    markers = [line for line in out.splitlines() if "=" in line]
    assert markers == ["hard=0 soft=0", "raise=1", "crashed=139", "cores=0"], out
    assert "Segmentation fault" in out and "core dumped" not in out, out


def test_dev_shm_is_sized_like_tmp(daemon, shell):
    row = shell.run(
        "df -k --output=size /dev/shm | tail -1;"
        " { head -c 64M /dev/zero > /dev/shm/fill; } 2>&1 | sed 's/.*: //';"
        " echo stored=$(( $(stat -c %s /dev/shm/fill) / 1048576 ))")
    out = row["output"].splitlines()
    tmpfs_mb = 16  # PG_SHELL_TMPFS_MB's default: /dev/shm is sized like /tmp
    assert int(out[0]) == tmpfs_mb * 1024, row["output"]
    assert "No space left on device" in row["output"]
    assert out[-1] == f"stored={tmpfs_mb}", row["output"]


def test_dev_shm_is_held_to_the_memory_limit(make_daemon, shell):
    # A tmpfs larger than the memory limit: its pages are the container's
    # memory (under runc charged to its cgroup, under gVisor the sentry's
    # own), so filling it ends in the OOM killer, never past the limit.
    make_daemon(PG_SHELL_MEMORY_MB="64", PG_SHELL_TMPFS_MB="128").start()
    row = shell.run("head -c 100M /dev/zero > /dev/shm/fill; echo stored=$?")
    assert (row["status"], row["exit_code"], row["reason"]) == ("failed", 137, "oom"), row
    assert "stored" not in row["output"]
    assert ok(shell.run("echo next"))["output"] == "next\n"


def host_owner(volumes_dir: str, session_id: str, path: str) -> tuple[int, int]:
    """uid and gid of ``path`` in the session's volume, read on the host: from
    the engine's mount when a container holds the volume, else from the
    (cleanly unmounted) ext4 image."""
    mount = Path(f"/var/lib/docker/volumes/pg-shell-home-{session_id}/_data")
    if os.path.ismount(mount):
        st = (mount / path).stat()
        return st.st_uid, st.st_gid
    image = Path(volumes_dir) / f"pg-shell-home-{session_id}.ext4"
    # The session's next (warm) container may have the image mounted already:
    # what the command wrote is then only in the mounted filesystem's cache
    # until it is written back to the image.
    os.sync()
    done = subprocess.run(["debugfs", "-R", f"stat /{path}", str(image)], capture_output=True,
                          text=True, timeout=60, check=True)
    found = re.search(r"User:\s+(\d+)\s+Group:\s+(\d+)", done.stdout)
    assert found, done.stdout + done.stderr
    return int(found[1]), int(found[2])


def test_a_file_a_command_creates_belongs_to_no_host_account(daemon, shell, executor_env):
    row = shell.run("echo mine > owned && stat -c %u:%g owned && id -u")
    assert row["output"] == f"{SANDBOX_UID}:{SANDBOX_GID}\n{SANDBOX_UID}\n", row
    uid, gid = host_owner(executor_env["PG_SHELL_VOLUMES_DIR"], shell.session_id, "owned")
    with pytest.raises(KeyError):
        pwd.getpwuid(uid)
    with pytest.raises(KeyError):
        grp.getgrgid(gid)
    assert uid != os.getuid() and uid != 0


def test_an_executor_without_a_disk_quota_warns_at_start_up(make_daemon, shell):
    daemon = make_daemon(PG_SHELL_DISK_QUOTA="none").start()
    # The plain volume (no quota) is the sandbox user's too.
    assert shell.run("echo up > f && cat f && stat -c %u f")["output"] == f"up\n{SANDBOX_UID}\n"
    daemon.stop()
    log = daemon.log()
    assert "WARNING" in log and "PG_SHELL_DISK_QUOTA=none: session homes have no disk quota" in log
    assert "Not for untrusted tenants" in log
