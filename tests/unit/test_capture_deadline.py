"""The capture's deadline (watch.py): the scan after a command gets
capture_base_s, the files it asked for as long again plus their bytes at
the slowest rate allowed; past it the command's status stands and its files
are not saved, with the reason. Pure: no engine, the kill is a stand-in."""

from __future__ import annotations

import queue
import threading
import time

from executor.sandbox.model import Limits, RunRequest
from executor.sandbox.output import OutputCapper
from executor.sandbox.protocol import Conversation, frame, json_frame
from executor.sandbox.watch import Frames, Watch, files_deadline_s

MiB = 1024 * 1024


def test_the_files_deadline_grows_with_their_bytes() -> None:
    assert files_deadline_s(30, 4 * MiB, 0) == 30
    assert files_deadline_s(30, 4 * MiB, 256 * MiB) == 30 + 64
    assert files_deadline_s(0.5, MiB, 10 * MiB) == 10.5


def test_a_scan_that_outlasts_its_deadline_leaves_the_status_and_says_why() -> None:
    frames: Frames = queue.Queue()
    exited = threading.Event()
    killed: list[str] = []

    def kill(container_id: str) -> None:  # the engine would end the stream and the container
        killed.append(container_id)
        frames.put(None)
        exited.set()

    req = RunRequest(command_id=1, session_id="s", worker_id="w", command="true", cwd="/",
                     env={}, image="i")
    watch = Watch(kill, Limits(timeout_s=60, capture_base_s=0.01), req, "ctr",
                  time.monotonic(), threading.Event())
    conversation = Conversation(OutputCapper(1024))
    frames.put((1, json_frame(b"x", {"status": 0})))  # the command ended; no manifest follows
    watch.collect(conversation, lambda _text: None, frames, exited)
    assert killed == ["ctr"]
    assert watch.reason is None and conversation.status == 0  # the command itself finished
    assert watch.capture_failure is not None
    assert watch.capture_failure.startswith("saving them took longer than its limit (0.01 s")


def _stopped_run(reports: bool) -> tuple[Watch, Conversation, list[str], list[str]]:
    """A command cancelled while it runs: the supervisor, told to stop it,
    reports its end (``reports``) or says nothing at all."""
    frames: Frames = queue.Queue()
    exited = threading.Event()
    stopped: list[str] = []
    killed: list[str] = []

    def stop(container_id: str) -> None:
        stopped.append(container_id)
        if reports:  # its processes killed, the shell's status, an empty home, the end
            frames.put((1, json_frame(b"x", {"status": 137})))
            frames.put((1, json_frame(b"M", {})))
            frames.put((1, frame(b"e")))
            frames.put(None)
            exited.set()

    def kill(container_id: str) -> None:
        killed.append(container_id)
        frames.put(None)
        exited.set()

    req = RunRequest(command_id=1, session_id="s", worker_id="w", command="sleep 60", cwd="/",
                     env={}, image="i")
    cancel = threading.Event()
    cancel.set()
    watch = Watch(kill, Limits(timeout_s=60, capture_base_s=5), req, "ctr", time.monotonic(),
                  cancel, stop=stop)
    conversation = Conversation(OutputCapper(1024))
    watch.collect(conversation, lambda _text: None, frames, exited)
    return watch, conversation, stopped, killed


def test_a_stopped_command_that_ends_keeps_its_container_until_its_files_are_told() -> None:
    watch, conversation, stopped, killed = _stopped_run(reports=True)
    assert (stopped, killed) == (["ctr"], [])
    assert watch.reason == "cancelled" and conversation.status == 137
    assert conversation.ended and conversation.manifest_done  # its files are saved


def test_a_stopped_command_that_never_ends_has_its_container_killed(monkeypatch) -> None:
    monkeypatch.setattr("executor.sandbox.watch.STOP_GRACE_S", 0.05)
    watch, conversation, stopped, killed = _stopped_run(reports=False)
    assert (stopped, killed) == (["ctr"], ["ctr"])
    assert watch.reason == "cancelled" and conversation.status is None


def _ended_run(status_frame: dict[str, object]) -> list[str]:
    """A command that ended and whose supervisor said all it will: what the
    watch did about the container's exit (the supervisor exits only once its
    stdin is closed)."""
    frames: Frames = queue.Queue()
    exited = threading.Event()
    done: list[str] = []

    def end_input() -> None:  # the supervisor's stdin closed: it exits
        done.append("stdin closed")
        frames.put(None)
        exited.set()

    def kill(container_id: str) -> None:
        done.append("killed")
        frames.put(None)
        exited.set()

    req = RunRequest(command_id=1, session_id="s", worker_id="w", command="true", cwd="/",
                     env={}, image="i")
    watch = Watch(kill, Limits(timeout_s=60, capture_base_s=5), req, "ctr", time.monotonic(),
                  threading.Event(), end_input=end_input)
    for kind, payload in ((b"x", status_frame), (b"M", {})):
        frames.put((1, json_frame(kind, payload)))
    frames.put((1, frame(b"e")))
    watch.collect(Conversation(OutputCapper(1024)), lambda _text: None, frames, exited)
    return done


def test_an_ended_conversation_does_not_wait_for_the_exit_nor_end_it() -> None:
    assert _ended_run({"status": 0}) == []  # removal, later, closes its stdin


def test_an_exit_still_needed_is_asked_for_by_closing_the_supervisor_s_stdin() -> None:
    # Killed by a signal, and the supervisor could not tell whether by the OOM killer.
    assert _ended_run({"status": 137}) == ["stdin closed"]
