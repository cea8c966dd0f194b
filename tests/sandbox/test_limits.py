"""Timeout, OOM and cancel are enforced and reported as such."""

from __future__ import annotations

import threading
import time

ROOT = "/home/sandbox"


def test_timeout_kills_and_keeps_partial_output(make_sandbox, run) -> None:
    box = make_sandbox(timeout_s=2)
    ran = run("echo before; mkdir t; cd t; sleep 60; echo after", box=box)
    assert ran.result.exit_code == 124
    assert ran.result.reason == "timeout"
    assert ran.output == "before\n"
    assert ran.result.cwd == ROOT  # killed: the session state is not updated
    assert ran.elapsed_s < 30  # behaviour bound (killed), not a benchmark


def test_memory_limit_is_reported_as_oom(make_sandbox, run) -> None:
    box = make_sandbox(memory_bytes=64 * 1024 * 1024)
    ran = run("python3 -c \"x = b'x' * (300 * 1024 * 1024); print('still' + 'alive')\"", box=box)
    assert ran.result.exit_code == 137
    assert ran.result.reason == "oom"
    assert "stillalive" not in ran.output


def test_cancel_kills_the_container_quickly(run, docker_client) -> None:
    cancel = threading.Event()
    cancelled_at: list[float] = []

    def cancel_soon(_cid: str) -> None:
        def fire() -> None:
            time.sleep(0.5)
            cancelled_at.append(time.monotonic())
            cancel.set()

        threading.Thread(target=fire, daemon=True).start()

    ran = run("echo started; sleep 60", cancel=cancel, on_started=cancel_soon, keep=True)
    returned_after = time.monotonic() - cancelled_at[0]
    assert ran.result.exit_code == 130
    assert ran.result.reason == "cancelled"
    assert ran.output == "started\n"
    assert returned_after < 5  # behaviour bound: killed, not waited out
    state = docker_client.api.inspect_container(ran.result.container_id)["State"]
    assert state["Running"] is False


def test_pids_limit_stops_fork_bombs(make_sandbox, run) -> None:
    box = make_sandbox(pids=32)
    script = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(2); os._exit(0)\n"
        "        n += 1\n"
        "    print(\"forked\", n)\n"
        "except OSError as e:\n"
        "    print(\"blocked after\", n)\n"
    )
    ran = run(f"python3 -c '{script}'", box=box)
    # (bash itself may then print "fork: retry" while writing its report)
    first = ran.output.splitlines()[0]
    assert first.startswith("blocked after ")
    assert int(first.split()[-1]) < 32
