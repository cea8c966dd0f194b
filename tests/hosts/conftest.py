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

from executor.workspace.cache import HostCache
from tests.conftest import require
from tests.engine_cleanup import remove_labelled

# Re-exported: the tenant side, driven through the SQL API.
from tests.executor.conftest import Shell, make_shell, shell  # noqa: F401
from tests.fixtures_stack import Daemon, remove_session_volumes
from tests.support import call

ENGINE_START_S = 90
LOAD_IMAGE_S = 600
# Sparse: it takes what the image and the volumes use (well under 1 GiB).
DISK_SIZE = "16G"


class Engine:
    """A dockerd started by this run; ``host`` is its DOCKER_HOST.

    Its data root is an ext4 file system of its own (an image file, mounted
    through a loop device): overlay2 needs a backing file system that is not
    itself an overlay, and the test machine's /var/tmp may be one (inside a
    container); there dockerd would fall back to vfs, whose containers cannot
    even stat their entrypoint as a non-root user."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = f"unix://{root / 'docker.sock'}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: Any = None

    def log_tail(self) -> str:
        log = self.root / "dockerd.log"
        return log.read_text(errors="replace")[-4000:] if log.exists() else ""

    def start(self) -> None:
        data, disk = self.root / "data", self.root / "disk.ext4"
        data.mkdir()
        (self.root / "exec").mkdir()
        for argv in (["truncate", "--size", DISK_SIZE, str(disk)],
                     ["mkfs.ext4", "-q", "-F", str(disk)],
                     ["mount", "-o", "loop", str(disk), str(data)]):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, (argv, done.stderr)
        with open(self.root / "dockerd.log", "ab") as log:
            self.proc = subprocess.Popen(
                ["unshare", "--net", "dockerd", "--data-root", str(data),
                 "--exec-root", str(self.root / "exec"), "-H", self.host,
                 "--pidfile", str(self.root / "docker.pid"),
                 "--bridge=none", "--iptables=false", "--ip-masq=false"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)  # a Ctrl-C of pytest must not reach it before the teardown
        deadline = time.monotonic() + ENGINE_START_S
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the second dockerd exited {self.proc.returncode}:\n{self.log_tail()}")
            if (self.root / "docker.sock").exists():
                client = docker.DockerClient(base_url=self.host, timeout=120)
                try:
                    client.ping()
                    self.client = client
                    return
                except Exception:
                    client.close()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the second dockerd did not answer on {self.host}:\n{self.log_tail()}")
            time.sleep(0.2)

    def load_image(self, image: str) -> None:
        """`docker save IMAGE | docker -H B load`: B has no registry to pull from."""
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert save.stdout is not None
        load = subprocess.run(["docker", "-H", self.host, "load"], stdin=save.stdout,
                              capture_output=True, timeout=LOAD_IMAGE_S)
        save.stdout.close()
        save_err = save.stderr.read() if save.stderr else b""
        save.wait(LOAD_IMAGE_S)
        assert save.returncode == 0 and load.returncode == 0, (save_err, load.stdout, load.stderr)
        assert self.client.images.get(image).id == image, "the loaded image has another id"

    def stop(self) -> None:
        """Everything on it, then the engine (and the containerd it started),
        then whatever is mounted under its root (its disk last), then the root.
        Also after a start that failed half-way."""
        if self.client is not None:
            try:
                for container in self.client.containers.list(all=True, sparse=True):
                    container.remove(force=True)
                for volume in self.client.volumes.list():
                    volume.remove(force=True)
            except Exception:
                pass  # an engine that broke is stopped all the same
            self.client.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        containerd_pid = self.root / "exec" / "containerd" / "containerd.pid"
        if containerd_pid.exists():
            # Only after a dockerd that had to be killed: its containerd lives on.
            try:
                os.kill(int(containerd_pid.read_text().strip()), signal.SIGKILL)
            except (ValueError, ProcessLookupError):
                pass
        for mount in mounts_under(self.root):
            # Lazy: the loop device of the disk is freed once nothing uses it.
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


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
    for tool in ("dockerd", "unshare", "docker", "mkfs.ext4"):
        require(shutil.which(tool) is not None, f"the {tool} command")
    engine = Engine(Path(tempfile.mkdtemp(prefix="pgtest-host-", dir="/var/tmp")))
    try:
        engine.start()
        engine.load_image(sandbox_image)
        yield engine
    finally:
        engine.stop()


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
        index = HostCache(str(self.volumes_dir)).load(session_id)
        return index.root if index else None


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
        remove_labelled(host.client, f"pg-shell.worker-id={host.worker_id}")
        remove_session_volumes(host.client, str(host.volumes_dir))
        for session_id in sessions:  # plain volumes (PG_SHELL_DISK_QUOTA=none)
            try:
                host.client.volumes.get(f"pg-shell-home-{session_id}").remove(force=True)
            except docker.errors.NotFound:
                pass


def session_ids(dsn: str) -> list[str]:
    conn = psycopg2.connect(dsn)
    try:
        return [str(r["id"]) for r in call(conn, "SELECT id FROM shell.sessions")]
    finally:
        conn.close()


@pytest.fixture
def hosts(make_hosts: Callable[..., tuple[Host, Host]]) -> tuple[Host, Host]:
    return make_hosts()
