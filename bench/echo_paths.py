"""The ways a keystroke reaches a program on a terminal and its echo comes
back, as bench.interactive drives them: pg_shell's HTTP API (send_input,
then the long-poll the page follows), `pg-shell run -t` under a
pseudo-terminal, and the reference, `docker attach` to a container with a
TTY. (The page in Chromium is bench/echo_page.py.)

Each path has a reader (a thread) that notes what came back and when; a key
is timed from just before it is sent to when the reader received its echo,
so the bench's own wait for the reader is not counted. The program is the
same on every path, by default `cat` on a terminal in its default (cooked)
mode, where the terminal echoes each key as it arrives. A program that
turns the terminal's echo off and prints keys itself (readline: `python3`,
`bash -i`) is a password prompt to pg_shell (DESIGN.md §13): what is typed
into it is stored redacted, another path through the database.
"""

from __future__ import annotations

import bisect
import fcntl
import html
import os
import re
import secrets
import struct
import subprocess
import termios
import threading
import time
from typing import Any, Protocol

import docker
import httpx

from executor.sandbox.model import Limits
from executor.sandbox.spec import container_args, host_config_args

DEFAULT_PROGRAM = "cat"
COLS, ROWS = 80, 24
# How long one key's echo may take before the bench gives up: a liveness
# bound (something is stuck), never a figure.
KEY_STALL_S = 60.0
FINISHED = ("done", "failed", "cancelled")
BENCH_LABEL = "pg-shell.bench"
CHANGE = re.compile(r'data-change="(\d+)"')
# A terminal command's raw output in its article: <pre class="out"> with
# data-from, data-end and data-bytes (shell.render_piece) and data-raw.
RAW_PIECE = re.compile(r'<pre class="out" data-from="(\d+)" data-end="(\d+)" data-bytes="(\d+)"'
                       r'[^>]* data-raw>(.*?)</pre>', re.S)
STATUS = re.compile(r'data-status="(\w+)"')


class EchoPath(Protocol):
    name: str

    def press(self, key: str) -> float:
        """Sends ``key``; the seconds until its echo came back."""

    def close(self) -> None:
        """Ends the program and lets go of what the path holds."""


class Echoes:
    """What a path's reader received, with when each piece arrived."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._data = bytearray()
        self._ends: list[int] = []  # where each piece ended in _data...
        self._times: list[float] = []  # ...and when it arrived (perf_counter)
        self._seen = 0  # where the next echo is looked for
        self._failed: str | None = None
        self._cond = threading.Condition()

    def feed(self, data: bytes, at: float) -> None:
        with self._cond:
            self._data += data
            self._ends.append(len(self._data))
            self._times.append(at)
            self._cond.notify_all()

    def fail(self, reason: str) -> None:
        with self._cond:
            self._failed = reason
            self._cond.notify_all()

    def wait_for(self, key: bytes, stall_s: float = KEY_STALL_S) -> float:
        """When ``key`` arrived, the first time after the previous echo
        waited for (anything else received meanwhile is skipped)."""
        deadline = time.monotonic() + stall_s
        with self._cond:
            while (found := self._data.find(key, self._seen)) < 0:
                if self._failed is not None:
                    raise RuntimeError(f"{self.what}: {self._failed}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"{self.what}: no echo of {key!r} within {stall_s:g} s; "
                                       f"received so far ends {bytes(self._data[-200:])!r}")
                self._cond.wait(left)
            self._seen = found + len(key)
            # The piece that brought the key's last byte.
            return self._times[bisect.bisect_right(self._ends, found + len(key) - 1)]


# -- pg_shell's HTTP API --------------------------------------------------------------------


class GatewayPath:
    """The HTTP calls the page makes for a terminal command, without the
    browser: POST /rpc/send_input per key (html/tty/view.js); the live
    feed's long-poll, always waiting and asked again at once after each
    answer (GET /rpc/session_changes_html, p_tail, `Prefer: wait=20`:
    html/live.js); and when the command's article shows a new change, the
    raw output its fragment carries, then GET /rpc/read_output only for
    what it did not (the view's update, html/tty/view.js). Two connections,
    as a browser holds them."""

    name = "gateway"

    def __init__(self, url: str, token: str, session_id: str, program: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        self._send = httpx.Client(base_url=url, headers=headers, timeout=60)
        self._poll = httpx.Client(base_url=url, headers=headers, timeout=60)
        self.session_id = session_id
        self.echoes = Echoes("gateway")
        self.send_s: list[float] = []  # send_input's own round trip, per key
        self.command_id = int(self._call("submit_command", {
            "p_session_id": session_id, "p_command": program, "p_tty": True, "p_cols": COLS,
            "p_rows": ROWS}))
        self._ended = threading.Event()
        self._follower = threading.Thread(target=self._follow, name="gateway-follow", daemon=True)
        self._follower.start()

    def _call(self, function: str, args: dict[str, Any]) -> Any:
        answer = self._send.post(f"/rpc/{function}", json=args)
        if answer.status_code != 200:
            raise RuntimeError(f"{function}: HTTP {answer.status_code} {answer.text}")
        return answer.json()

    def press(self, key: str) -> float:
        started = time.perf_counter()
        self._call("send_input", {"p_command_id": self.command_id, "p_data": key})
        self.send_s.append(time.perf_counter() - started)
        return self.echoes.wait_for(key.encode()) - started

    def _get(self, function: str, params: dict[str, Any], **headers: str) -> httpx.Response:
        answer = self._poll.get(f"/rpc/{function}", params=params, headers=headers)
        if answer.status_code != 200:
            raise RuntimeError(f"{function}: HTTP {answer.status_code} {answer.text}")
        return answer

    def _follow(self) -> None:
        cursor, seen, offset = 0, 0, 0  # the feed's cursor; the article's change; bytes read
        mine = re.compile(rf'<article [^>]*id="cmd-{self.command_id}"[^>]*>.*?</article>', re.S)
        try:
            while not self._ended.is_set():
                fragment = self._get("session_changes_html", {
                    "p_session_id": self.session_id, "p_after_change": cursor, "p_tail": "true"},
                    Prefer="wait=20", Accept="text/html").text
                changes = [int(c) for c in CHANGE.findall(fragment)]
                cursor = max([cursor, *changes])
                article = mine.search(fragment)
                change = int(CHANGE.findall(article.group(0))[0]) if article else 0
                if change <= seen:
                    continue
                seen = change
                assert article is not None
                offset, total = self._take(article.group(0), offset)
                status = STATUS.findall(article.group(0))[0]
                while total is None or offset < total:  # the view reads what is missing
                    [page] = self._get("read_output", {"p_command_id": self.command_id,
                                                       "p_offset": offset}).json()
                    if page["output"]:
                        self.echoes.feed(page["output"].encode(), time.perf_counter())
                    offset, total = int(page["next_offset"]), int(page["output_bytes"])
                    status = page["status"]
                if status in FINISHED:
                    self._ended.set()
        except Exception as exc:  # the bench's wait says what the reader died of
            self.echoes.fail(f"following the output failed: {exc}")

    def _take(self, article: str, offset: int) -> tuple[int, int | None]:
        """What the article's raw piece adds after ``offset`` (as the view
        takes it); the new offset, and the output's size (None: no piece
        that follows on, read_output says)."""
        piece = RAW_PIECE.search(article)
        if not piece:
            return offset, None
        start, end, total = (int(piece.group(i)) for i in (1, 2, 3))
        if not start <= offset <= end:
            return offset, None
        text = html.unescape(piece.group(4))
        if text.startswith("\n"):  # HTML drops a newline that opens a <pre> (shell.pre_text)
            text = text[1:]
        if end > offset:
            self.echoes.feed(text.encode()[offset - start:], time.perf_counter())
        return end, total

    def close(self) -> None:
        # A new line hands the typed line to cat, end-of-file at a line's
        # start ends it: the command completes as a terminal one does.
        try:
            self._call("send_input", {"p_command_id": self.command_id, "p_data": "\r\x04"})
            self._ended.wait(KEY_STALL_S)
        finally:
            if not self._ended.is_set():
                self._call("cancel_command", {"p_command_id": self.command_id})
            self._send.close()
            self._poll.close()


# -- the CLI on a pseudo-terminal -------------------------------------------------------------


def cli_has_tty(pg_shell: str, env: dict[str, str]) -> bool:
    """Whether this checkout's `pg-shell run` takes -t."""
    shown = subprocess.run([pg_shell, "run", "--help"], env=env, capture_output=True, text=True,
                           check=False).stdout
    return any(part in shown for part in ("-t,", "-t ", "--tty"))


class CliPath:
    """`pg-shell run -t -s SESSION PROGRAM` with a pseudo-terminal as its
    controlling terminal, as a person at a terminal runs it; a key is a
    byte written to the terminal, its echo what the CLI printed back."""

    name = "cli"

    def __init__(self, pg_shell: str, env: dict[str, str], session_id: str,
                 program: str) -> None:
        self.echoes = Echoes("cli")
        self.session_id = session_id
        self._master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        # setsid --ctty: a session of its own whose controlling terminal is
        # its stdin, as a login shell's is (pty.fork would fork this
        # threaded process; Popen only execs).
        self.proc = subprocess.Popen(["setsid", "--ctty", pg_shell, "run", "-t", "-s", session_id,
                                      program], env=env, stdin=slave, stdout=slave, stderr=slave,
                                     close_fds=True)
        os.close(slave)
        self._reader = threading.Thread(target=self._read, name="cli-read", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:  # EIO: the CLI exited and the terminal closed
                data = b""
            if not data:
                self.echoes.fail(f"the CLI ended (exit status {self.proc.poll()})")
                return
            self.echoes.feed(data, time.perf_counter())

    def press(self, key: str) -> float:
        started = time.perf_counter()
        os.write(self._master, key.encode())
        return self.echoes.wait_for(key.encode()) - started

    def close(self) -> None:
        try:
            os.write(self._master, b"\r\x04")
            self.proc.wait(KEY_STALL_S)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._master)


# -- the reference: docker attach -------------------------------------------------------------


class DockerAttachPath:
    """A running container with a TTY, made with the executor's own
    hardening and limits (executor/sandbox/spec.py: read-only root, no
    network, no capabilities, the sandbox user, seccomp, limits) and the
    same image, running the same program on the engine's terminal; a key
    is a byte written to the attach socket (what `docker attach` does), its
    echo what the socket gives back."""

    name = "docker_attach"

    def __init__(self, image: str, shell_root: str, program: str) -> None:
        self.echoes = Echoes("docker attach")
        self._client = docker.from_env()
        api = self._client.api
        tag = f"interactive-{secrets.token_hex(4)}"
        # A volume of its own for the one mount the spec gives every container.
        self._volume = self._client.volumes.create(name=f"bench-{tag}",
                                                   labels={BENCH_LABEL: tag})
        args = container_args(image, {BENCH_LABEL: tag}, shell_root)
        args.update(tty=True, entrypoint=["bash", "-c", program], command=None)
        host = api.create_host_config(**host_config_args(Limits(), shell_root, self._volume.name,
                                                         "runc", seed_from_image=True))
        self.container_id = str(api.create_container(host_config=host, **args)["Id"])
        sock = api.attach_socket(self.container_id,
                                 params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        self._sock = sock._sock  # the raw socket under docker-py's SocketIO
        self._sock.settimeout(None)
        api.start(self.container_id)
        api.resize(self.container_id, height=ROWS, width=COLS)
        self._reader = threading.Thread(target=self._read, name="docker-read", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                self.echoes.fail("the attach stream ended")
                return
            self.echoes.feed(data, time.perf_counter())

    def press(self, key: str) -> float:
        started = time.perf_counter()
        self._sock.sendall(key.encode())
        return self.echoes.wait_for(key.encode()) - started

    def close(self) -> None:
        try:
            self._sock.close()
        finally:
            self._client.api.remove_container(self.container_id, force=True)
            self._volume.remove(force=True)
            self._client.close()
