"""Two executor hosts on one machine: host A is the test engine (DOCKER_HOST
or the default socket), host B a second `dockerd` started here, with its own
data root, exec root, socket and pidfile. Each host has its own executor
settings (worker id, signing key, volumes directory), so nothing but
PostgreSQL is shared between them, as between two machines.

Why the second engine runs in its own network namespace (`unshare --net`):
started in the host's namespace, a dockerd removes the first engine's
docker0 bridge when it stops, and the first engine's bridged containers and
builds break. Sandbox containers use network "none", so B needs no bridge
(--bridge=none --iptables=false --ip-masq=false).

Disk quotas: the executors keep the default "loop" mode on both hosts. The
loop device is a host device and B shares the machine's mount namespace, so
B mounts `type=ext4,device=/dev/loopN` volumes as A does.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import psycopg2
import pytest

from tests.conftest import require

# Re-exported: the tenant side, driven through the SQL API.
from tests.executor.conftest import Shell, make_shell, shell  # noqa: F401
from tests.fixtures_stack import Daemon, remove_session_volumes
from tests.support import call

ENGINE_START_S = 90
LOAD_IMAGE_S = 600


@dataclass
class Engine:
    """A dockerd started by this run; ``host`` is its DOCKER_HOST."""

    root: Path
    proc: subprocess.Popen[bytes]
    host: str
    client: Any

    @property
    def log_path(self) -> Path:
        return self.root / "dockerd.log"

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""


def start_engine(root: Path) -> Engine:
    socket_path = root / "docker.sock"
    host = f"unix://{socket_path}"
    (root / "data").mkdir()
    (root / "exec").mkdir()
    with open(root / "dockerd.log", "ab") as log:
        proc = subprocess.Popen(
            ["unshare", "--net", "dockerd", "--data-root", str(root / "data"),
             "--exec-root", str(root / "exec"), "-H", host, "--pidfile", str(root / "docker.pid"),
             "--bridge=none", "--iptables=false", "--ip-masq=false"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)  # a Ctrl-C of pytest must not reach it before the teardown
    engine = Engine(root, proc, host, None)
    deadline = time.monotonic() + ENGINE_START_S
    while True:
        if proc.poll() is not None:
            raise AssertionError(
                f"the second dockerd exited {proc.returncode}:\n{engine.log_tail()}")
        if socket_path.exists():
            client = docker.DockerClient(base_url=host, timeout=120)
            try:
                client.ping()
                engine.client = client
                return engine
            except Exception:
                client.close()
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the second dockerd did not answer on {host}:\n{engine.log_tail()}")
        time.sleep(0.2)


def load_image(engine: Engine, image: str) -> None:
    """`docker save IMAGE | docker -H B load`: B has no registry to pull from."""
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert save.stdout is not None
    load = subprocess.run(["docker", "-H", engine.host, "load"], stdin=save.stdout,
                          capture_output=True, timeout=LOAD_IMAGE_S)
    save.stdout.close()
    save_err = save.stderr.read() if save.stderr else b""
    save.wait(LOAD_IMAGE_S)
    assert save.returncode == 0 and load.returncode == 0, (save_err, load.stdout, load.stderr)
    assert engine.client.images.get(image).id == image, "the loaded image has another id"


def stop_engine(engine: Engine) -> None:
    """Everything on it, then the engine (and the containerd it started),
    then whatever it left mounted under its root, then the root."""
    if engine.client is not None:
        try:
            for container in engine.client.containers.list(all=True, sparse=True):
                container.remove(force=True)
            for volume in engine.client.volumes.list():
                volume.remove(force=True)
        except Exception:
            pass  # an engine that broke is stopped all the same
        engine.client.close()
    if engine.proc.poll() is None:
        engine.proc.send_signal(signal.SIGTERM)
        try:
            engine.proc.wait(60)
        except subprocess.TimeoutExpired:
            engine.proc.kill()
            engine.proc.wait()
    containerd_pid = engine.root / "exec" / "containerd" / "containerd.pid"
    if containerd_pid.exists():
        # Only after a dockerd that had to be killed: its containerd lives on.
        try:
            os.kill(int(containerd_pid.read_text().strip()), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass
    for mount in mounts_under(engine.root):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
    shutil.rmtree(engine.root, ignore_errors=True)


def mounts_under(root: Path) -> list[str]:
    """Mount points below ``root``, deepest first."""
    prefix = str(root) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # \040 and friends
        if point.startswith(prefix):
            points.append(point)
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


@pytest.fixture(scope="session")
def second_engine(docker_client: Any, sandbox_image: str) -> Iterator[Engine]:
    """Host B's Docker engine, with the sandbox image loaded; stopped and
    its data root removed at the end, after a failure too."""
    require(os.geteuid() == 0, "root (a second dockerd is started)")
    for tool in ("dockerd", "unshare", "docker"):
        require(shutil.which(tool) is not None, f"the {tool} command")
    root = Path(tempfile.mkdtemp(prefix="pgtest-host-", dir="/var/tmp"))
    engine: Engine | None = None
    try:
        engine = start_engine(root)
        load_image(engine, sandbox_image)
        yield engine
    finally:
        if engine is not None:
            stop_engine(engine)
        else:
            shutil.rmtree(root, ignore_errors=True)


# -- one executor per host --------------------------------------------------------


@dataclass
class Host:
    """An executor host: its engine, its executor daemon and its files."""

    name: str
    daemon: Daemon
    client: Any

    @property
    def worker_id(self) -> str:
        return self.daemon.env["PG_SHELL_WORKER_ID"]

    @property
    def volumes_dir(self) -> Path:
        return Path(self.daemon.env["PG_SHELL_VOLUMES_DIR"])

    def start(self) -> Host:
        """Starts the executor and waits until this start logged "ready"
        (Daemon.start alone returns at once on a restart: the log has it)."""
        before = len(self.daemon.log()) if self.daemon.log_path.exists() else 0
        self.daemon.start()
        deadline = time.monotonic() + 60
        while "ready" not in self.daemon.log()[before:]:
            assert self.daemon.proc is not None
            if self.daemon.proc.poll() is not None:
                raise AssertionError(
                    f"host {self.name}'s executor exited:\n{self.daemon.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"host {self.name}'s executor never got ready:\n{self.daemon.log()[-4000:]}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """SIGTERM, and the executor ends cleanly (exit 0)."""
        self.daemon.stop()
        assert self.daemon.proc is not None
        assert self.daemon.proc.returncode == 0, (self.name, self.daemon.log()[-4000:])

    def index_root(self, session_id: str) -> str | None:
        """The root this host's index says its copy of the session holds (None: no index)."""
        path = self.volumes_dir / f"pg-shell-home-{session_id}.workspace.json"
        return json.loads(path.read_text())["root"] if path.exists() else None


@pytest.fixture
def make_hosts(make_daemon: Callable[..., Daemon], second_engine: Engine, docker_client: Any,
               db: str, tmp_path: Path) -> Iterator[Callable[..., tuple[Host, Host]]]:
    """(host A, host B), executors not started; overrides apply to both."""
    made: list[Host] = []

    def make(**overrides: str) -> tuple[Host, Host]:
        a = Host("A", make_daemon(PG_SHELL_SIGNING_KEY_FILE=str(tmp_path / "host-a.key"),
                                  **overrides), docker_client)
        b_volumes = tempfile.mkdtemp(prefix="pgtest-exec-vol-", dir="/var/tmp")
        b = Host("B", make_daemon(PG_SHELL_DOCKER_HOST=second_engine.host,
                                  PG_SHELL_WORKER_ID=f"pgtest-{secrets.token_hex(4)}",
                                  PG_SHELL_VOLUMES_DIR=b_volumes,
                                  PG_SHELL_SIGNING_KEY_FILE=str(tmp_path / "host-b.key"),
                                  **overrides), second_engine.client)
        made.extend((a, b))
        return a, b

    yield make
    # Before make_daemon's own clean-up (it knows only host A's engine).
    for host in made:
        host.daemon.stop()
    sessions = session_ids(db)
    for host in made:
        for container in host.client.containers.list(
                all=True, sparse=True, filters={"label": f"pg-shell.worker-id={host.worker_id}"}):
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
        remove_session_volumes(host.client, str(host.volumes_dir))
        for session_id in sessions:  # plain volumes (PG_SHELL_DISK_QUOTA=none)
            try:
                host.client.volumes.get(f"pg-shell-home-{session_id}").remove(force=True)
            except docker.errors.NotFound:
                pass
        shutil.rmtree(host.volumes_dir, ignore_errors=True)


def session_ids(dsn: str) -> list[str]:
    conn = psycopg2.connect(dsn)
    try:
        return [str(r["id"]) for r in call(conn, "SELECT id FROM shell.sessions")]
    finally:
        conn.close()


@pytest.fixture
def hosts(make_hosts: Callable[..., tuple[Host, Host]]) -> tuple[Host, Host]:
    return make_hosts()
