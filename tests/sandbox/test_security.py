"""Every hardening promise, tried from inside the container."""

from __future__ import annotations

import json
import os
import socket

import pytest

from executor.sandbox.hardening import seccomp_profile
from tests.sandbox.conftest import NoFiles

ROOT = "/home/sandbox"


def test_root_filesystem_is_read_only(run) -> None:
    ran = run("touch /etc/x; touch /x; touch /usr/bin/x; echo ok > ~/ok && cat ~/ok")
    assert ran.output.count("Read-only file system") == 3
    assert ran.output.endswith("ok\n")


def test_only_loopback_interface_and_no_routes(run) -> None:
    ran = run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; echo ---; tail -n +2 "
              "/proc/net/route | wc -l")
    assert ran.output == "lo\n---\n0\n"


def test_the_commands_own_loopback_works_and_localhost_resolves(run) -> None:
    # The engine sets up no network for the container (spec.py), so it
    # writes no /etc/hosts either: the image resolves these names itself.
    ran = run("""python3 -c '
import socket
server = socket.create_server(("localhost", 0))
with socket.create_connection(("localhost", server.getsockname()[1])):
    print("connected", server.accept()[1][0])
print(socket.gethostbyname("sandbox"))
'""")
    assert ran.output in ("connected 127.0.0.1\n127.0.0.2\n", "connected ::1\n127.0.0.2\n")


def test_host_loopback_is_not_reachable(run) -> None:
    # A listener on the host's 127.0.0.1: a container sharing the host's
    # network namespace would reach it.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        ran = run(f"(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo connected || echo refused")
    assert ran.output.strip().endswith("refused")


def test_no_capabilities_no_new_privs_and_seccomp(run) -> None:
    ran = run("grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' "
              "/proc/self/status")
    fields = dict(line.split(":\t") for line in ran.output.splitlines())
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert fields[cap] == "0000000000000000", cap
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2"  # filter mode: the engine's default minus io_uring


def test_runs_as_the_sandbox_user_65000(run) -> None:
    ran = run("id -u; id -g; stat -c %u:%g ~")
    assert ran.output == "65000\n65000\n65000:65000\n"


def test_no_docker_socket_anywhere(run) -> None:
    ran = run(
        "find / \\( -path /proc -o -path /sys \\) -prune -o -type s -print 2>/dev/null;"
        " ls -d /var/run/docker.sock /run/docker.sock 2>&1; echo end"
    )
    sockets = [line for line in ran.output.splitlines() if line.startswith("/")
               and "docker" in line]
    assert sockets == []
    assert ran.output.count("No such file or directory") == 2


def test_executor_environment_is_not_visible(run, monkeypatch) -> None:
    secret = "s3cr3t-" + os.urandom(8).hex()
    monkeypatch.setenv("PG_SHELL_TEST_SECRET", secret)
    monkeypatch.setenv("DATABASE_URL", f"postgresql://x:{secret}@localhost/db")
    ran = run("env; cat /proc/1/environ | tr '\\0' '\\n'; cat /proc/*/environ "
              "2>/dev/null | tr '\\0' '\\n'")
    assert "HOME=/home/sandbox" in ran.output  # the env really was printed
    assert secret not in ran.output
    assert "DATABASE_URL" not in ran.output


def left_home(where: str, starts_in: str = "~") -> str:
    """The line a command ending outside the home prints last, on its stderr."""
    return (f"pg-shell: cd: {where}: outside the session's home; the next command starts in "
            f"{starts_in} (only the home is kept)\n")


def test_cwd_escape_through_a_symlink_is_rejected(run) -> None:
    ran = run("ln -sfn / up && cd up && pwd -P")
    assert ran.output == "/\n" + left_home("/")  # the physical directory: pwd -P
    assert ran.result.exit_code == 1
    assert ran.result.cwd == ROOT
    assert ran.result.state_note is not None and "outside" in ran.result.state_note


@pytest.mark.parametrize("where", ["/", "/tmp", "/home"])
def test_ending_outside_the_home_fails_and_says_where_the_next_command_starts(run, where) -> None:
    assert run("mkdir -p sub").result.exit_code == 0
    ran = run(f"cd {where}", cwd=f"{ROOT}/sub")
    assert ran.output == left_home(where, "~/sub")
    assert ran.result.exit_code == 1
    # The executor's own check still keeps the previous cwd.
    assert ran.result.cwd == f"{ROOT}/sub"
    assert ran.result.state_note is not None and "outside" in ran.result.state_note


@pytest.mark.parametrize(("command", "code"), [("cd /tmp; false", 1), ("cd /; exit 3", 3),
                                                ("cd /; (exit 0)", 1)])
def test_a_failing_command_ending_outside_the_home_keeps_its_own_status(run, command,
                                                                         code) -> None:
    ran = run(command)
    assert ran.output == left_home(command[3:command.index(";")])
    assert ran.result.exit_code == code


@pytest.mark.parametrize("command", ["cd /; mkdir -p ~/x; cd ~/x",
                                     "cd /tmp && ls >/dev/null && cd ~"])
def test_only_the_final_directory_counts(run, command) -> None:
    ran = run(command)
    assert ran.output == ""
    assert ran.result.exit_code == 0
    assert ran.result.state_note is None


def test_the_line_goes_where_the_commands_stderr_went_and_never_costs_the_report(run) -> None:
    # To a file; to a reader the end of the command kills (the write fails
    # instead of ending the shell); to nowhere (closed, even in posix mode).
    for command in ("exec 2>err; cd /", "exec 2> >(cat >/dev/null); cd /",
                    "set -o posix; exec 2>&-; cd /"):
        ran = run(f"export KEPT=1; {command}")
        assert (ran.output, ran.result.exit_code) == ("", 1), command
        assert ran.result.env.get("KEPT") == "1", command  # the state report arrived
    assert run("cat err").output == left_home("/")


def test_forged_state_report_is_still_validated(run) -> None:
    # The shell's own state descriptor is the tenant's to write: a report
    # written there is only ever validated data.
    forge = (
        "trap - EXIT;"
        " printf '%s\\0' /home/sandbox/../../etc 'BASH_FUNC_x%%=() { :; }' >&$__pg_shell_state"
    )
    ran = run(forge, env={"OLD": "1"})
    assert ran.output == ""
    assert ran.result.cwd == ROOT
    assert ran.result.env == {"OLD": "1"}
    assert "normalized" in (ran.result.state_note or "")
    assert "invalid variable name" in (ran.result.state_note or "")


def test_frames_printed_by_the_command_are_only_output(run) -> None:
    # A command printing the supervisor's frames (an exit status, a state
    # report, an end) forges nothing: its output is framed as output.
    fake = "\\x78\\x00\\x00\\x00\\x0e{\\x22status\\x22: 0}\\x65\\x00\\x00\\x00\\x00"
    ran = run(f"printf '{fake}'; exit 7")
    assert ran.result.exit_code == 7
    assert '"status": 0' in ran.output


def test_the_supervisor_cannot_be_read_signalled_or_traced(run) -> None:
    ran = run("cat /proc/1/environ; echo rc=$?; ls /proc/1/fd; echo rc=$?; kill -INT 1; kill -TERM "
              "1; kill -KILL 1; echo still here", files=NoFiles())
    assert ran.output.count("Permission denied") >= 2
    assert "still here" in ran.output
    assert ran.result.exit_code == 0
    assert ran.result.manifest is not None  # the supervisor lived to scan the files


def test_hardening_flags_are_in_docker_inspect(run, docker_client, session_id) -> None:
    ran = run("true", keep=True)
    info = docker_client.api.inspect_container(ran.result.container_id)
    host = info["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["NetworkMode"] == "none"
    assert info["Config"]["NetworkDisabled"] is True  # not even an engine network sandbox
    assert not info["NetworkSettings"]["Networks"]
    assert host["CapDrop"] == ["ALL"]
    assert not host.get("CapAdd")
    # The engine's default minus io_uring, always passed: never the engine's
    # own default by omission, never "unconfined".
    assert host["SecurityOpt"] == ["no-new-privileges", f"seccomp={seccomp_profile()}"]
    assert json.loads(seccomp_profile())["syscalls"][-1]["names"] == [
        "io_uring_enter", "io_uring_register", "io_uring_setup"]
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in host["Ulimits"] if u["Name"] == "core"] == [
        ("core", 0, 0)]
    assert host["ShmSize"] == 16 * 1024 * 1024
    assert host["Privileged"] is False
    assert not host.get("Binds")
    assert not host.get("Devices")
    assert host["PidsLimit"] > 0
    assert host["Memory"] > 0 and host["MemorySwap"] == host["Memory"]
    assert host["NanoCpus"] > 0
    assert {u["Name"] for u in host["Ulimits"]} == {"nofile", "fsize", "core"}
    assert set(host["Tmpfs"]) == {"/tmp"}
    assert "nosuid" in host["Tmpfs"]["/tmp"] and "nodev" in host["Tmpfs"]["/tmp"]
    assert host["AutoRemove"] is False
    mounts = info["Mounts"]
    assert len(mounts) == 1
    assert mounts[0]["Type"] == "volume"
    assert mounts[0]["Name"] == f"pg-shell-home-{session_id}"
    assert mounts[0]["Destination"] == ROOT
    config = info["Config"]
    assert config["User"] == "65000:65000"
    assert config["Hostname"] == "sandbox"
    names = {e.split("=", 1)[0] for e in config["Env"]}
    assert names <= {"PATH", "LANG", "HOME"}  # the command, cwd and env arrive on stdin
    labels = config["Labels"]
    assert labels["pg-shell.session-id"] == session_id
    assert labels["pg-shell.command-id"].isdigit()
    assert "pg-shell.worker-id" in labels
    assert labels["pg-shell.scope"].startswith("pgtest-")
