"""Escape attempts, end to end: a tenant's command goes through the SQL API,
the real `pg-shell executor` daemon runs it in the real sandbox, and each
test asserts the attack failed with everything a user or operator can
observe (the command row, the next command of the session, the host).

Network checks only ever look inside the container or aim at loopback;
disk fills write a bounded amount (quota + 64 MiB at most).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import socket
import time
from pathlib import Path

import docker.errors
import psycopg2.extensions

from executor.sandbox.output import truncation_notice
from tests.security.conftest import ok

ROOT = "/home/sandbox"
MiB = 1024 * 1024


def lines(row: dict) -> list[str]:
    return row["output"].splitlines()


def forge(report: str) -> str:
    """A command that replaces the shell's state report with ``report``
    (JSON: {"cwd", "env"}), written to the state descriptor the shell's
    script keeps in $__pg_shell_state: the command runs in that very shell,
    so it can. DESIGN says that is fine because every report is validated."""
    fields = json.loads(report)
    items = [fields["cwd"]] + [f"{k}={v}" for k, v in fields["env"].items()]
    return (
        "trap - EXIT;"
        " printf '%s\\0' " + " ".join(shlex.quote(i) for i in items) + " >&$__pg_shell_state"
    )


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def running_containers(docker_client, shell, command_id: int) -> list:
    """The command's container while it runs, found by the id its row
    records (a warm container learns its command over stdin: no label names it)."""
    container_id = shell.command(command_id)["container_id"]
    if not container_id:
        return []
    return docker_client.containers.list(filters={"id": container_id})


def tenant_processes_left(docker_client, shell, command_id: int) -> list[list[str]]:
    """The processes other than the supervisor in the command's container.
    A command completes when the supervisor's last frame arrives, and the
    supervisor sends it only after killing every tenant process, so the
    container may still be going away (PID 1 exiting), but never holds more."""
    found = []
    for container in running_containers(docker_client, shell, command_id):
        try:
            top = container.top(ps_args="-o pid,args")
        except docker.errors.APIError:
            continue  # it stopped between the listing and the question
        found += [row for row in top.get("Processes") or []
                  if "/opt/pg-shell/supervisor" not in row[-1]]
    return found


def wait_until_removed(docker_client, shell, command_id: int, timeout_s: float = 60) -> None:
    """The finished command's container is removed (off the command's
    critical path, so shortly after its row completes)."""
    deadline = time.monotonic() + timeout_s
    while running_containers(docker_client, shell, command_id):
        assert time.monotonic() < deadline, "the finished command's container was not removed"
        time.sleep(0.2)


def host_cmdlines_containing(needle: bytes) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    found.append(entry.name)
            except OSError:
                pass
    return found


# -- the root filesystem ---------------------------------------------------------------------


def test_writes_outside_the_home_are_refused_and_leave_nothing(daemon, shell):
    targets = ["/pwned", "/etc/pwned", "/usr/pwned", "/usr/bin/pwned", "/opt/pg-shell/pwned",
               "/opt/pg-shell/run", "/etc/passwd", "/var/pwned", "/root/pwned"]
    before = ok(shell.run("sha256sum /opt/pg-shell/run /etc/passwd"))["output"]
    attack = "".join(f'if echo pwned >> {t}; then echo "WROTE {t}"; fi\n' for t in targets) + (
        "mkdir /etc/pwned.d || echo mkdir-refused\n"
        "ln -s /tmp /usr/pwned-link || echo ln-refused\n"
        "cp /bin/true /usr/local/bin/pwned || echo cp-refused\n"
        "chmod 777 /opt/pg-shell/run || echo chmod-refused\n"
        "mv /opt/pg-shell/run /opt/pg-shell/run.old || echo mv-refused\n"
    )
    row = shell.run(attack)
    assert row["status"] == "done"
    assert "WROTE" not in row["output"]
    for t in targets:
        assert re.search(re.escape(t) + r": (Read-only file system|Permission denied)",
                         row["output"]), (t, row["output"])
    for what in ("mkdir", "ln", "cp", "chmod", "mv"):
        assert f"{what}-refused" in lines(row)

    after = ok(shell.run("sha256sum /opt/pg-shell/run /etc/passwd; ls -d /pwned /etc/pwned "
                         "/usr/pwned /usr/bin/pwned /opt/pg-shell/pwned /var/pwned /etc/pwned.d "
                         "/usr/pwned-link /usr/local/bin/pwned /opt/pg-shell/run.old 2>&1; true"))
    assert after["output"].startswith(before)
    assert after["output"].count("No such file or directory") == 10
    # The home stays the one writable place (besides the small /tmp).
    ok(shell.run("echo mine > mine && cat mine"))


# -- network -------------------------------------------------------------------------------------

NETWORK_PROBE = r"""
ls /sys/class/net; echo ---
tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; echo ---
tail -n +2 /proc/net/route | wc -l; echo ---
awk '$10 != "lo"' /proc/net/ipv6_route 2>/dev/null | wc -l; echo ---
(exec 3<>/dev/tcp/127.0.0.1/PORT) 2>/dev/null && echo bash-CONNECTED || echo bash-refused
/usr/bin/python3 -I -c '
import socket
for fam, addr in ((socket.AF_INET, ("127.0.0.1", PORT)), (socket.AF_INET6, ("::1", PORT))):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr)
        print("CONNECTED", addr[0])
    except OSError as e:
        print("refused", addr[0], type(e).__name__)
try:
    print("RESOLVED", socket.getaddrinfo("example.com", 80))
except OSError as e:
    print("no-resolve", type(e).__name__)
for name, args in (("raw", (socket.AF_INET, socket.SOCK_RAW, 1)),
                   ("packet", (socket.AF_PACKET, socket.SOCK_RAW, 0))):
    try:
        socket.socket(*args)
        print("OPENED", name)
    except PermissionError as e:
        print(name, "PermissionError", e.errno)
'
getent hosts example.com; echo "getent=$?"
"""


def test_no_network_and_the_hosts_loopback_is_unreachable(daemon, shell):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        row = ok(shell.run(NETWORK_PROBE.replace("PORT", str(port))))
        listener.setblocking(False)
        try:
            conn, peer = listener.accept()
            conn.close()
            raise AssertionError(f"the container reached the host's listener from {peer}")
        except BlockingIOError:
            pass  # nobody ever connected
    sections = row["output"].split("---\n")
    assert sections[0] == "lo\n"  # /sys/class/net
    assert sections[1] == "lo\n"  # /proc/net/dev
    assert sections[2] == "0\n"  # no IPv4 route at all
    assert sections[3] == "0\n"  # no IPv6 route except on lo
    rest = sections[4]
    assert "CONNECTED" not in rest and "RESOLVED" not in rest and "OPENED" not in rest
    assert "bash-refused" in rest
    assert "refused 127.0.0.1 ConnectionRefusedError" in rest  # its own, empty loopback
    assert re.search(r"refused ::1 \w+", rest)
    assert "no-resolve gaierror" in rest
    assert "raw PermissionError 1" in rest and "packet PermissionError 1" in rest
    assert "getent=2" in rest  # "key not found"


# -- privileges and kernel interfaces ------------------------------------------------------------

PRIVILEGE_PROBE = r"""
mount -t tmpfs x /mnt 2>&1; echo "mount=$?"
unshare -r -m true 2>&1; echo "unshare-r-m=$?"
unshare --user --map-root-user id 2>&1; echo "unshare-user=$?"
touch f && chown 0:0 f 2>&1; echo "chown=$?"
echo "setuid-files=$(find / \( -path /proc -o -path /sys \) -prune -o -type f -perm /6000 \
  -print 2>/dev/null | wc -l)"
cp /usr/bin/id ./myid && chmod u+s,g+s ./myid && echo "copied=$(stat -c %A myid)" \
  && echo "myid=$(./myid -u):$(./myid -g)"
grep -E '^[^ ]+ [^ ]+ [^ ]+ [^ ]+ /home/sandbox ' /proc/self/mountinfo | cut -d' ' -f6
if command -v sudo >/dev/null; then sudo -n true 2>&1; echo "sudo=$?"; else echo "sudo=absent"; fi
su -c 'id -u' root </dev/null 2>&1; echo "su=$?"
echo 1 > /proc/sys/kernel/sysrq 2>&1; echo "proc-sys=$?"
echo 3 > /proc/sys/vm/drop_caches 2>&1; echo "drop-caches=$?"
echo h > /proc/sysrq-trigger 2>&1; echo "sysrq=$?"
modprobe dummy 2>&1; echo "modprobe=$?"
/usr/bin/python3 -I -c '
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    "unshare-newuser": (272, 0x10000000), "unshare-newns": (272, 0x00020000),
    "mount": (165, b"x", b"/mnt", b"tmpfs", 0, 0), "init_module": (175, 0, 0, b""),
    "finit_module": (313, 0, b"", 0), "delete_module": (176, b"ext4", 0),
    "keyctl": (250, 0, 0), "add_key": (248, b"user", b"x", b"y", 1, -2),
    "bpf": (321, 0, 0, 0), "setuid0": (105, 0), "setgid0": (106, 0),
    "chroot": (161, b"/tmp"), "kexec_load": (246, 0, 0, 0, 0), "reboot": (169, 0, 0, 0, 0),
}
for name, (nr, *args) in calls.items():
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    print("sys", name, r, errno.errorcode.get(ctypes.get_errno(), "OK"))
'
echo "uid=$(id -u) euid=$(id -u) caps=$(grep CapEff /proc/self/status | cut -f2)"
"""


def test_privilege_and_kernel_interfaces_are_refused(daemon, shell, runtime):
    row = shell.run(PRIVILEGE_PROBE)
    assert row["status"] == "done", row
    out = row["output"]
    values = dict(line.split("=", 1) for line in lines(row) if re.match(r"^[a-z-]+=", line))
    for name in ("mount", "unshare-r-m", "unshare-user", "chown", "su", "proc-sys", "drop-caches",
                 "sysrq", "modprobe"):
        assert values[name] != "0", (name, out)
    # /proc/sys and /proc/sysrq-trigger: read-only mounts under runc; a kernel
    # without magic SysRq (this host's, gVisor's) lacks some of the knobs, and
    # nothing can create them.
    refused = re.findall(r"^bash: line \d+: /proc/(?:sys/kernel/sysrq|sys/vm/drop_caches"
                         r"|sysrq-trigger): (?:Read-only file system|Permission denied"
                         r"|No such file or directory)$", out, re.MULTILINE)
    assert len(refused) == 3, out
    assert values["setuid-files"] == "0"
    # A set-uid copy in the home: the bit is set, but the volume is nosuid
    # (and no-new-privileges holds anyway), so it runs as the user.
    assert values["copied"].startswith("-rwsr-s")
    assert values["myid"] == "65000:65000"
    mount_opts = [line for line in lines(row) if re.match(r"^rw(,|$)", line)]
    assert len(mount_opts) == 1, out
    if runtime == "runc":
        # gVisor's mount table is its own and does not show the host mount's
        # flags; myid above is what nosuid is for, under either runtime.
        assert {"nosuid", "nodev"} <= set(mount_opts[0].split(",")), out
    assert values["sudo"] != "0"
    assert values["uid"].startswith("65000 euid=65000 caps=0000000000000000")
    syscalls = {m[0]: (m[1], m[2])
                for m in re.findall(r"^sys (\S+) (-?\d+) (\w+)$", out, re.MULTILINE)}
    assert len(syscalls) == 14, out
    for name, (result, err) in syscalls.items():
        assert result == "-1" and err in ("EPERM", "EACCES", "ENOSYS"), (name, result, err)
    assert "uid=0" not in out and "\n0\n" not in out


def test_ptrace_reaches_only_the_tenants_own_processes(daemon, shell):
    # The default seccomp profile allows ptrace (kernel >= 4.8) and this
    # kernel has no Yama, so attaching to a same-uid sibling may work. What
    # must hold: the container's PID namespace holds only this command's
    # processes, all uid 65000 without capabilities, so there is nothing of
    # another tenant, the executor or the host to attach to.
    row = shell.run(r"""
sleep 60 & victim=$!
/usr/bin/python3 -I -c '
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
print("attach", r, errno.errorcode.get(ctypes.get_errno(), "OK"))
if r == 0:
    os.waitpid(pid, 0)
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
r = libc.ptrace(16, 99999, None, None)  # no such process: the host pids are not visible
print("attach-outside", 99999, r, errno.errorcode.get(ctypes.get_errno(), "OK"))
r = libc.ptrace(16, 1, None, None)  # the supervisor: same uid, but not dumpable
print("attach-supervisor", r, errno.errorcode.get(ctypes.get_errno(), "OK"))
' "$victim"
kill "$victim"
for s in /proc/[0-9]*/status; do
  awk '/^(Uid|CapEff):/ {printf "%s ", $2} END {print ""}' "$s" 2>/dev/null
done | sort -u
echo "pid1=$(tr '\0' ' ' < /proc/1/cmdline)"
echo "nprocs=$(ls -d /proc/[0-9]* | wc -l)"
""")
    ok(row)
    out = row["output"]
    assert re.search(r"^attach (0 OK|-1 EPERM)$", out, re.MULTILINE), out
    assert re.findall(r"^attach-outside \d+ -1 (\w+)$", out, re.MULTILINE) == ["ESRCH"]
    # Every process in sight: uid 65000, no capabilities.
    assert "65000 0000000000000000 \n" in out
    uid_lines = [line for line in lines(row) if re.match(r"^\d+ [0-9a-f]{16} $", line)]
    assert uid_lines == ["65000 0000000000000000 "], out
    assert "attach-supervisor -1 EPERM" in out
    assert "pid1=/usr/bin/python3 -IS /opt/pg-shell/supervisor" in out
    assert int(re.search(r"nprocs=(\d+)", out).group(1)) < 10
    ok(shell.run("echo still-fine"))


# -- secrets of the executor --------------------------------------------------------------------


def test_executor_secrets_are_nowhere_in_the_container(make_daemon, shell):
    canary = f"canary-{secrets.token_hex(12)}"
    daemon = make_daemon(PG_SHELL_CANARY=canary).start()
    dbname = psycopg2.extensions.parse_dsn(daemon.env["DATABASE_URL"])["dbname"]
    # The needles are assembled inside the container, so the command text
    # never carries them whole.
    half = len(canary) // 2
    row = shell.run(
        f"a='{canary[:half]}'; b='{canary[half:]}'; d1='{dbname[:5]}'; d2='{dbname[5:]}'\n"
        "env; echo ---\n"
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$f\"; done 2>/dev/null; echo ---\n"
        "grep -rIls -e \"$a$b\" -e \"$d1$d2\" -e DATABASE_URL -e PG_SHELL_WORKER_ID"
        " /etc /opt /home /tmp /run /var /usr/local /root /srv /mnt /dev/shm; echo \"grep=$?\"\n"
        "find / \\( -path /proc -o -path /sys \\) -prune -o \\( -type s -o -name '*.sock' -o -name "
        "'docker*' \\) -print 2>/dev/null; echo find-done\n"
        "ls /var/run/docker.sock /run/docker.sock 2>&1; true\n"
    )
    ok(row)
    out = row["output"]
    env_part, proc_part, rest = out.split("---\n")
    assert "HOME=/home/sandbox" in env_part and "PATH=" in env_part  # the env really was listed
    assert "HOME=/home/sandbox" in proc_part
    for leaked in (canary, "PG_SHELL_CANARY", "DATABASE_URL", dbname, daemon.env["DATABASE_URL"],
                   daemon.env["PG_SHELL_WORKER_ID"], "PG_SHELL_SCOPE", "DOCKER_HOST"):
        assert leaked not in out, leaked
    # grep ran, listed no file (1: no match, 2: also some directory is absent) ...
    # ... and find saw no socket, nothing docker*.
    assert re.match(r"grep=[12]\nfind-done\n", rest), rest
    assert rest.count("No such file or directory") == 2


# -- resource exhaustion -------------------------------------------------------------------------


def test_fork_bomb_ends_and_another_tenant_is_unaffected(make_daemon, make_shell, docker_client):
    # The time limit is a liveness bound: the calm command beside the bomb
    # must finish inside it even on a busy host.
    daemon = make_daemon(PG_SHELL_TIMEOUT_S="20", PG_SHELL_PIDS="64").start()
    alice, bob = make_shell("alice"), make_shell("bob")
    started = time.monotonic()
    # The bomb gets a few seconds to hit the pids limit: when the command
    # ends, the entrypoint kills whatever it left running.
    bomb = alice.submit(":(){ :|:& };:; sleep 3")
    calm = bob.submit("echo bob-$((6 * 7)); sleep 1; ls -A | wc -l; echo done")
    calm_row = bob.wait(calm, timeout=120)
    bomb_row = alice.wait(bomb, timeout=120)
    assert time.monotonic() - started < 120
    ok(calm_row)
    assert calm_row["output"] == "bob-42\n0\ndone\n"
    # The pids limit makes forks fail; the bomb ends when the command does
    # (the entrypoint, PID 1, kills what is left), or else at the deadline. Its session state is
    # unchanged (the report, when it got through, adds at most the default PATH, LANG and TERM).
    assert (bomb_row["status"], bomb_row["reason"]) in (
        ("done", None), ("failed", "timeout")), bomb_row
    assert "fork: retry: Resource temporarily unavailable" in bomb_row["output"]
    assert bomb_row["cwd_after"] == bomb_row["cwd_before"] == ROOT
    assert set(bomb_row["env_after"]) <= set(bomb_row["env_before"]) | {"PATH", "LANG", "TERM"}
    assert tenant_processes_left(docker_client, alice, bomb) == []
    wait_until_removed(docker_client, alice, bomb)
    assert daemon.proc.poll() is None
    assert ok(alice.run("echo recovered"))["output"] == "recovered\n"


def test_memory_bomb_is_oom_and_the_session_survives(make_daemon, shell):
    daemon = make_daemon(PG_SHELL_MEMORY_MB="64").start()
    ok(shell.run("mkdir kept && cd kept && export KEPT=1"))
    row = shell.run("cd /home/sandbox; x=$(head -c 400000000 /dev/zero | tr '\\0' x); echo "
                    "survived ${#x}")
    assert (row["status"], row["exit_code"], row["reason"]) == ("failed", 137, "oom"), row
    assert "survived" not in row["output"]
    row = shell.run("python3 -c 'a = [bytearray(2**20) for _ in range(4096)]; print(\"survived\")'")
    assert (row["status"], row["exit_code"], row["reason"]) == ("failed", 137, "oom"), row
    # A SIGKILL that is not the OOM killer's is the command's own exit status.
    row = shell.run("kill -KILL $$")
    assert (row["status"], row["exit_code"], row["reason"]) == ("done", 137, None), row
    assert daemon.proc.poll() is None
    # The killed commands changed nothing; the session goes on.
    row = ok(shell.run('pwd; echo "$KEPT"'))
    assert row["output"] == "/home/sandbox/kept\n1\n"


def test_disk_fill_stops_at_the_quota(make_daemon, shell):
    quota_mb = 64
    daemon = make_daemon(PG_SHELL_DISK_QUOTA_MB=str(quota_mb), PG_SHELL_FSIZE_MB="512").start()
    row = shell.run(f"dd if=/dev/zero of=big bs=1M count={quota_mb + 64} 2>&1; echo \"dd=$?\";"
                    " dd if=/dev/zero of=/tmp/big bs=1M count=64 2>&1; echo \"tmp=$?\";"
                    " du -m big | cut -f1")
    assert row["status"] == "done", row
    assert row["output"].count("No space left on device") >= 2, row["output"]
    assert "dd=1" in lines(row) and "tmp=1" in lines(row)
    assert int(lines(row)[-1]) < quota_mb
    image = Path(daemon.env["PG_SHELL_VOLUMES_DIR"]) / f"pg-shell-home-{shell.session_id}.ext4"
    st = image.stat()
    assert st.st_size == quota_mb * MiB
    assert st.st_blocks * 512 <= quota_mb * MiB
    # Freeing space works and the session is usable again.
    row = ok(shell.run("rm big && echo hello > small && cat small && ls -A"))
    assert row["output"] == "hello\nsmall\n"


def test_output_flood_is_capped_the_executor_stays_small_and_nothing_piles_up_on_disk(
        make_daemon, shell, docker_client):
    cap = MiB
    daemon = make_daemon(PG_SHELL_TIMEOUT_S="8", PG_SHELL_OUTPUT_CAP_BYTES=str(cap)).start()
    ok(shell.run("echo warm-up"))
    rss_before = rss_kib(daemon.proc.pid)
    marker = truncation_notice(cap)

    # 16 times the cap (the `yes` below writes far more: the executor's
    # memory is measured over both), small enough to end well inside the
    # time limit even under gVisor on a busy host.
    row = shell.run("head -c 16777216 /dev/zero | tr '\\0' x; echo; echo finished-flood",
                    timeout=120)
    ok(row)
    assert row["truncated"] is True
    assert row["output"] == "x" * cap + marker
    assert len(row["output"].encode()) <= cap + len(marker)

    # `yes` never ends: the deadline ends it. Meanwhile its output must not
    # pile up anywhere on the host (Docker's json-file log driver kept every
    # byte, hundreds of MiB per second, until the container was removed).
    cid = shell.submit("yes")
    shell.wait(cid, until=lambda r: r["status"] == "running" and r["output_bytes"] > 0)
    [container] = running_containers(docker_client, shell, cid)
    time.sleep(3)
    log_path = docker_client.api.inspect_container(container.id)["LogPath"]
    logged = os.path.getsize(log_path) if log_path and os.path.exists(log_path) else 0
    row = shell.wait(cid, timeout=120)
    assert (row["status"], row["exit_code"], row["reason"]) == ("failed", 124, "timeout")
    assert row["truncated"] is True
    note = "\n[pg-shell: timed out, so its cd and export did not take effect]\n"
    assert row["output"] == "y\n" * (cap // 2) + marker + note
    assert logged < 16 * MiB, (
        f"the engine logged {logged} bytes of a capped command's output to {log_path}")

    assert daemon.proc.poll() is None
    growth_kib = rss_kib(daemon.proc.pid) - rss_before
    assert growth_kib < 48 * 1024, f"executor RSS grew by {growth_kib} KiB"
    assert ok(shell.run("echo after"))["output"] == "after\n"


# -- the session's cwd -------------------------------------------------------------------------


def test_cd_out_of_the_root_is_never_saved(daemon, shell):
    ok(shell.run("mkdir -p sub && ln -s / up && ln -s /etc e && cd sub"))
    for attack, where in (("cd ../up", "/"), ("cd ../e", "/etc"), ("cd /tmp", "/tmp"),
                          ("cd /", "/"), ("cd ../..", "/home"),
                          ("cd -P ../up/proc/self/cwd", "/home/sandbox/sub")):
        row = shell.run(f"{attack} && pwd -P")
        assert row["status"] == "done" and row["output"].startswith(f"{where}\n"), (attack, row)
        if where.startswith(ROOT):
            assert row["exit_code"] == 0  # /proc/self/cwd resolves back inside: allowed
            continue
        # The shell answers the user (a failure, with the reason); the
        # executor's own check keeps the previous cwd regardless.
        assert row["exit_code"] == 1, (attack, row)
        assert row["cwd_after"] == f"{ROOT}/sub", (attack, row)
        assert row["output"] == (
            f"{where}\npg-shell: cd: {where}: outside the session's home; the next command starts"
            " in ~/sub (only the home is kept)\n"
            f"\n[pg-shell: cwd {where!r} is outside {ROOT}; keeping the previous one]\n"), (
                attack, row)
        assert shell.run("pwd")["output"] == f"{ROOT}/sub\n"


# -- processes outliving their command ---------------------------------------------------------


def test_background_processes_do_not_survive_the_command(daemon, shell, docker_client):
    started = time.monotonic()
    cid = shell.submit("(sleep 300 &); nohup sleep 301 >/dev/null 2>&1 & disown;"
                       " setsid sleep 302 & (trap '' TERM HUP; exec sleep 303) & echo spawned")
    row = ok(shell.wait(cid, timeout=120))
    assert row["output"] == "spawned\n"
    assert time.monotonic() - started < 60  # did not wait for the sleeps
    assert tenant_processes_left(docker_client, shell, cid) == []
    wait_until_removed(docker_client, shell, cid)
    row = ok(shell.run("ps -e -o comm="))
    assert "sleep" not in row["output"]
    # The supervisor, the shell and ps, nothing else.
    assert sorted(lines(row)) == ["bash", "ps", "supervisor"]


# -- other tenants -------------------------------------------------------------------------------


def test_a_tenant_cannot_reach_another_tenants_files(daemon, make_shell):
    alice, bob = make_shell("alice"), make_shell("bob")
    secret = f"TOPSECRET-{secrets.token_hex(8)}"
    ok(bob.run(f"echo {secret} > secret-bob.txt && mkdir bobdir"))
    half = len(secret) // 2
    row = alice.run(
        "cat /home/sandbox/secret-bob.txt 2>&1; ls -A /home; ls -A /home/sandbox; echo ---\n"
        "find / \\( -path /proc -o -path /sys \\) -prune -o -name 'secret-bob*' -print "
        "2>/dev/null; echo ---\n"
        f"a='{secret[:half]}'; b='{secret[half:]}'\n"
        "grep -rsl \"$a$b\" /home /tmp /mnt /var /run /dev/shm /opt /srv; echo \"grep=$?\"\n"
        "ls /dev | grep -c -E '^(loop|sd|vd|nvme|dm-)'; true"
    )
    assert row["status"] == "done"
    out = row["output"]
    assert secret not in out
    first, found, rest = out.split("---\n")
    assert "No such file or directory" in first
    assert first.splitlines()[1:] == ["sandbox"]  # /home holds only our (empty) home
    assert found == ""
    assert rest.splitlines() == ["grep=2", "0"] or rest.splitlines() == ["grep=1", "0"]

    # Forged reports pointing at bob's volume (host path or via ..) are refused.
    for target in (f"/var/lib/docker/volumes/pg-shell-home-{bob.session_id}/_data",
                   f"/home/sandbox/../../var/lib/docker/volumes/pg-shell-home-{bob.session_id}/_data",
                   f"/home/sandbox-{bob.session_id}"):
        row = alice.run(forge('{"cwd": "' + target + '", "env": {}}'))
        assert row["status"] == "done" and row["cwd_after"] == ROOT, row
        assert "[pg-shell: " in row["output"] and ("outside" in row["output"]
                                                   or "normalized" in row["output"])
    assert alice.run("ls -A")["output"] == ""
    assert bob.run("cat secret-bob.txt")["output"] == f"{secret}\n"


# -- the environment as an attack vector --------------------------------------------------------


def test_path_hijack_cannot_fake_the_state_report_or_brick_the_session(daemon, make_shell):
    shell = make_shell("eve")
    tag = f"hijack{secrets.token_hex(6)}"
    fake = ("#!/bin/sh\\n"
            f"touch /home/sandbox/{tag}-ran-$(basename \"$0\")\\n"
            "echo '\\''{\"cwd\": \"/etc\", \"env\": {\"PWNED\": \"1\"}}'\\''\\n")
    row = ok(shell.run(
        f"mkdir -p {tag} && for t in python3 python env cat bash sh pwd printf; do"
        f" printf '{fake}' > {tag}/$t && chmod +x {tag}/$t; done &&"
        f" export PATH=/home/sandbox/{tag}:$PATH"))
    assert row["cwd_after"] == ROOT
    assert row["env_after"]["PATH"].startswith(f"/home/sandbox/{tag}:")
    assert "PWNED" not in row["env_after"]
    # The next command runs, and it is the user's PATH that the user's
    # commands see; the entrypoint and its report never ran the fakes.
    row = ok(shell.run("echo alive; builtin pwd; command -v python3; ls -A"))
    assert row["output"] == f"alive\n{ROOT}\n/home/sandbox/{tag}/python3\n{tag}\n"
    assert row["env_after"]["PATH"].startswith(f"/home/sandbox/{tag}:")
    assert "PWNED" not in row["env_after"]
    # The executor never runs anything from the session either.
    assert daemon.proc.poll() is None
    assert host_cmdlines_containing(tag.encode()) == []


def test_bash_startup_variables_cannot_brick_the_session(daemon, make_shell):
    # BASH_ENV and SHELLOPTS are read by the entrypoint's own bash at start-up;
    # a stored value must never stop every later command from running.
    cases = {
        "BASH_ENV": ("printf 'exit 0\\n' > benv && export BASH_ENV=/home/sandbox/benv", None),
        "SHELLOPTS": (None, ('{"cwd": "/home/sandbox", "env": '
                             '{"SHELLOPTS": "braceexpand:hashall:interactive-comments:noexec"}}')),
        "BASHOPTS": (None, '{"cwd": "/home/sandbox", "env": {"BASHOPTS": "nullglob:failglob"}}'),
        "PROMPT_COMMAND": ("export PROMPT_COMMAND='echo hijacked'", None),
        "ENV": ("printf 'exit 0\\n' > envrc && export ENV=/home/sandbox/envrc POSIXLY_CORRECT=1",
                None),
        # The entrypoint's own variable names: the report must still arrive.
        "__pg_shell_out": (None, ('{"cwd": "/home/sandbox", "env": {"__pg_shell_out": "0", '
                                  '"__pg_shell_nonce": "x", "__pg_shell_command": "exit"}}')),
    }
    for name, (plant, report) in cases.items():
        shell = make_shell("eve")
        row = shell.run(plant if plant else forge(report))
        assert row["status"] == "done", (name, row)
        row = shell.run("echo alive; echo *; cd /home/sandbox; export AFTER=1")
        assert row["status"] == "done" and row["output"].startswith("alive\n"), (name, row)
        assert "hijacked" not in row["output"]
        assert row["env_after"].get("AFTER") == "1", (name, row)
        assert daemon.proc.poll() is None


def test_loader_variables_cannot_brick_the_session(daemon, make_shell):
    shell = make_shell("eve")
    # A garbage LD_PRELOAD: ld.so warns and goes on.
    ok(shell.run("head -c 512 /dev/urandom > evil.so && export LD_PRELOAD=/home/sandbox/evil.so"))
    row = shell.run("echo alive")
    assert row["status"] == "done" and "alive\n" in row["output"], row
    assert ok(shell.run("unset LD_PRELOAD; echo clean"))["output"] == "clean\n"

    # LD_LIBRARY_PATH stored while harmless, then a broken libc dropped there:
    # every dynamically linked program now fails to start.
    ok(shell.run("mkdir lib && export LD_LIBRARY_PATH=/home/sandbox/lib"))
    shell.run("head -c 4096 /usr/lib/x86_64-linux-gnu/libc.so.6 > lib/libc.so.6")
    row = shell.run("echo alive")
    assert row["status"] == "done" and row["output"].startswith("alive\n"), row
    # ... and the user can repair it from inside the session.
    row = shell.run("unset LD_LIBRARY_PATH; rm -r lib; echo repaired")
    assert row["status"] == "done" and row["output"].startswith("repaired\n"), row
    row = ok(shell.run("ls -A; echo ${LD_LIBRARY_PATH-unset}"))
    assert row["output"] == "evil.so\nunset\n"
    assert "LD_LIBRARY_PATH" not in row["env_after"]
    assert daemon.proc.poll() is None


def test_hostile_environments_are_rejected_and_the_previous_one_kept(daemon, shell):
    kept = ok(shell.run("export KEEP_ME=yes"))["env_after"]
    assert kept["KEEP_ME"] == "yes"
    attacks = {
        "for i in $(seq 10000); do export V$i=x; done; echo many":
            "more than 256 exported variables",
        "export BIG=$(head -c 102400 /dev/zero | tr '\\0' a); echo big":
            "$BIG is longer than 32768 bytes",
        "export HUGE=$(head -c 10485760 /dev/zero | tr '\\0' a); echo huge": "state report",
        # Builtins only: 400 process starts would take most of the time
        # limit under gVisor.
        "printf -v w '%30000s' ''; w=${w// /w}; for ((i = 1; i <= 200; i++)); do export W$i=$w;"
        " done; echo wide": "",
    }
    for command, note in attacks.items():
        row = shell.run(command, timeout=120)
        assert row["status"] == "done", (command[:40], row["status"], row["reason"])
        assert row["env_after"] == kept, command[:40]
        assert "[pg-shell: " in row["output"] and note in row["output"], (command[:40],
                                                                          row["output"][-300:])
        assert daemon.proc.poll() is None
    row = ok(shell.run('echo "$KEEP_ME ${V1-none} ${#BIG} ${#HUGE}"'))
    assert row["output"] == "yes none 0 0\n"
