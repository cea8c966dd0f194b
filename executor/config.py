"""Settings: environment variables with the PG_SHELL_ prefix (and DATABASE_URL),
validated when a command starts, never read at import time.

Every setting is one field of `Settings` with its meaning in `description`: the
docs/configuration.md's table is generated from them (ops/settings-table).
`OPS_ONLY_VARIABLES` lists the PG_SHELL_* names that only the set-up scripts,
docker-compose or the tests read, so that any other PG_SHELL_* name that is
not a setting can be refused as a typo (executor/environment.py)."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import uuid
from typing import TYPE_CHECKING, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from executor import environment
from executor.client_settings import DEFAULT_URL, URL_PATTERN
from executor.errors import ConfigError
from executor.resources import resource_dir

if TYPE_CHECKING:
    from executor.sandbox import Sandbox
    from executor.sandbox.model import Limits

MiB = 1024 * 1024
# Where a session's files are mounted in its container. Fixed: the image's home
# directory, the SQL defaults of new sessions and replays, and the workspace
# capture all assume it, and a tenant never sees the host's paths anyway.
SHELL_ROOT = "/home/sandbox"
# Read by ops/ scripts, docker-compose.yml or the tests, never by `pg-shell`.
OPS_ONLY_VARIABLES = (
    "PG_SHELL_STATE_DIR",                # ops/lib.sh: logs, pids, the persistent cluster
    "PG_SHELL_BASE_IMAGE",               # ops/build-sandbox-image: the debootstrap'd base
    "PG_SHELL_BASE_SUITE",
    "PG_SHELL_SANDBOX_REPO",
    "PG_SHELL_ROOTLESS_USER",            # ops/rootless-docker
    "PG_SHELL_DB_PASSWORD",              # docker-compose.yml
    "PG_SHELL_AUTHENTICATOR_PASSWORD",
    "PG_SHELL_HTTP_BIND",
    "PG_SHELL_HTTP_PORT",
    "PG_SHELL_DOCKER_SOCKET",
    "PG_SHELL_CANARY",                   # tests: a secret that must never reach a container
    "PG_SHELL_TEST_SECRET",
)
log = logging.getLogger(__name__)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PG_SHELL_", extra="ignore")

    # -- the database and the gateway
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("PG_SHELL_DATABASE_URL", "DATABASE_URL"),
        description="PostgreSQL connection string (`PG_SHELL_DATABASE_URL` wins if both are set)")
    gateway_database_url: str | None = Field(
        default=None,
        description="the gateway's login, shell_authenticator as with PostgREST (unset: "
                    "`DATABASE_URL`, switching roles per request all the same)")
    executor_role: str = Field(default="shell_executor",
                               description="the role the executor switches to after connecting")
    listen_host: str = Field(default="127.0.0.1", description="where `pg-shell serve` listens")
    listen_port: int = Field(default=8080, ge=1, le=65535, description="its port")
    html_dir: str = Field(default_factory=lambda: str(resource_dir("html")),
                          description="the web UI's files")
    max_body_bytes: int = Field(
        default=2 * MiB, ge=1024,
        description="largest request body `pg-shell serve` reads (413 beyond it, refused from "
                    "Content-Length or while it streams, before it is buffered)")
    max_upload_bytes: int = Field(
        default=129 * MiB, ge=1024,
        description="the same for `upload_file` calls that carry a valid token (a 64 MiB file "
                    "travels hex-encoded in JSON: twice its size)")
    header_timeout_s: float = Field(
        default=10.0, gt=0, le=30,
        description="a connection whose request headers are not complete this long after it "
                    "opened (or after the previous answer) is closed")
    idle_timeout_s: float = Field(
        default=10.0, gt=0, le=30,
        description="a request body that stalls this long, or an idle keep-alive connection, "
                    "is closed")
    min_body_rate: int = Field(
        default=16 * 1024, ge=1,
        description="bytes a second a request body must average once `PG_SHELL_IDLE_TIMEOUT_S` "
                    "has passed; a slower one (a byte now and then) is closed")
    max_connections: int = Field(
        default=256, ge=2,
        description="connections `pg-shell serve` holds at once; a request beyond them gets 503")
    long_polls: int = Field(
        default=192, ge=1,
        description="long-polls (`Prefer: wait`) `pg-shell serve` holds at once; one beyond gets "
                    "429 with Retry-After (keep it below `PG_SHELL_MAX_CONNECTIONS`)")
    long_polls_per_user: int = Field(
        default=16, ge=1, description="long-polls one user may hold at once (429 beyond)")
    requests_per_user: int = Field(
        default=32, ge=1,
        description="requests one signed-in user may have in progress at `pg-shell serve` at "
                    "once, long-polls and streamed files included (429 with Retry-After beyond)")
    db_slots_per_user: int = Field(
        default=4, ge=1,
        description="database connections one signed-in user's requests hold at once (of the "
                    "gateway's 16); her further calls wait for one of hers, not for the pool")
    response_budget_bytes: int = Field(
        default=4 * MiB, ge=64 * 1024,
        description="largest page of rows `pg-shell serve` sends: a longer one stops at a row "
                    "boundary with 206 and a Content-Range to continue from")
    login_attempts_per_minute: int = Field(
        default=30, ge=1,
        description="logins the gateway accepts per client address and minute (429 beyond; the "
                    "database also throttles each username)")
    trusted_proxies: str = Field(
        default="",
        description="addresses or networks (comma-separated; `127.0.0.1` for a reverse proxy on "
                    "the same host) whose `X-Forwarded-For` `pg-shell serve` believes for the "
                    "client's address, which the per-address limits count; unset: nobody's, "
                    "the connection's own address counts")

    # -- the headless CLI (`pg-shell run`, …)
    # Read without pydantic too, when they are all that is set (client_settings.py).
    url: str = Field(default=DEFAULT_URL, pattern=URL_PATTERN,
                     description="where the CLI finds the HTTP API")
    token: str | None = Field(default=None, repr=False,
                              description="the CLI's token (unset: the one `pg-shell login` saved)")
    session: str | None = Field(default=None, description="the CLI's default session")

    # -- the executor: identity, claiming, leases
    worker_id: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_.:@-]{1,200}$",
        description="a stable id lets a restarted executor settle its predecessor's commands at "
                    "once (unset: generated per process)")
    concurrency: int = Field(default=4, ge=1, le=256,
                             description="commands run at once (different sessions)")
    host_id: str = Field(
        default_factory=socket.gethostname, pattern=r"^[A-Za-z0-9_.:@-]{1,200}$",
        description="this host's name for claim affinity (executors sharing an engine and a "
                    "volumes directory share it)")
    affinity_grace_ms: int = Field(
        default=50, ge=0, le=10000,
        description="how long other hosts leave a session whose files this host holds")
    template_wait_s: float = Field(
        default=60, ge=0, le=3600,
        description="how long a session whose template has no image on this host is left to "
                    "hosts that have one; past it, this host takes its command and fails it, "
                    "saying so")
    warm_max: int | None = Field(
        default=None, ge=0, le=4096,
        description="warm containers (started ahead for recently active sessions, each used "
                    "once) this executor holds at most; default 2 x concurrency, 0 turns them off")
    warm_per_user: int = Field(
        default=4, ge=1, le=4096,
        description="warm containers this executor holds at most for the sessions of one user "
                    "(the rest of the pool stays for other tenants)")
    warm_per_session: int = Field(
        default=2, ge=1, le=16,
        description="warm containers one session holds at most: with 2, a command typed right "
                    "after the previous one's output finds one ready")
    warm_blank: bool = Field(
        default=True,
        description="keep one container started on a blank home for the next new session "
                    "(its first command starts as a warm one); loop volumes only, and only "
                    "when warm containers are on")
    warm_idle_s: float = Field(
        default=60, gt=0, le=3600,
        description="how long a warm container waits for its session's next command before "
                    "it is removed")
    poll_interval_s: float = Field(default=1.0, gt=0, le=60,
                                   description="fallback poll when no NOTIFY arrives")
    lease_s: int = Field(default=30, ge=5, le=3600, description="lease on a claimed command")
    heartbeat_interval_s: float = Field(default=5.0, gt=0, le=600,
                                        description="how often leases are renewed")
    reap_interval_s: float = Field(default=60.0, gt=0,
                                   description="how often leftover containers are looked for")
    shutdown_grace_s: float = Field(default=30.0, ge=0,
                                    description="on SIGTERM, how long running commands may finish")
    output_flush_interval_s: float = Field(
        default=0.05, gt=0, le=5, description="how often streamed output is written")
    output_notify_interval_s: float = Field(
        default=0.25, ge=0, le=5,
        description="how often, at most, a streaming command wakes the session's listeners "
                    "(output written meanwhile is announced once the interval has passed)")

    # -- metrics
    metrics_host: str = Field(default="127.0.0.1",
                              description="where the executor serves Prometheus `/metrics`")
    metrics_port: int = Field(default=9464, ge=0, le=65535,
                              description="its port (0: off)")
    gateway_metrics_port: int = Field(
        default=9465, ge=0, le=65535,
        description="where `pg-shell serve` serves its Prometheus `/metrics`, on "
                    "`PG_SHELL_METRICS_HOST`, never on the public origin (0: off)")
    metrics_interval_s: float = Field(
        default=5.0, gt=0, le=3600,
        description="how often the executor and the gateway read the queue depth")

    # -- the engine and the image
    image: str = Field(
        default="pg-shell-sandbox:latest",
        description="the sandbox image (pinned to its digest at start-up; an image promoted with "
                    "`pg-shell image promote` takes precedence)")
    scope: str = Field(
        default="default", pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="label of this deployment's containers: executors reap leftovers only within "
                    "their scope, so deployments sharing an engine need distinct scopes")
    docker_host: str | None = Field(default=None,
                                    description="the Docker engine (unset: `DOCKER_HOST`)")
    allow_rootful: bool = Field(default=False, description="accept a rootful engine")
    runtime: str = Field(
        default="runc", pattern=r"^[a-z][a-z0-9_-]{0,39}$",
        description="the container runtime commands run under, unless an administrator put "
                    "their user on another (`pg-shell user runtime`): `runc` (the host's kernel) "
                    "or `runsc` (gVisor's kernel; ops/docker-engine and ops/rootless-docker "
                    "register it); the engine must have it, or the executor refuses to start")

    # -- per-command limits
    timeout_s: float = Field(default=30.0, gt=0, le=24 * 3600,
                             description="wall-clock limit; exit 124, reason `timeout`")
    memory_mb: int = Field(default=256, ge=16,
                           description="memory = memory+swap; exit 137, reason `oom`")
    pids: int = Field(default=128, ge=8,
                      description="processes and threads (under runsc: processes, counted by "
                                  "gVisor's kernel; the host allows its sandbox 64 + 16 × this "
                                  "many threads)")
    cpus: float = Field(default=1.0, gt=0, description="CPUs (fractions allowed)")
    nofile: int = Field(default=256, ge=16, description="open files")
    fsize_mb: int = Field(default=64, ge=1, description="largest file a command may write")
    tmpfs_mb: int = Field(default=16, ge=1, description="size of the `/tmp` tmpfs")
    output_cap_bytes: int = Field(
        default=MiB, ge=1024, description="output beyond this is dropped after a visible marker")
    disk_quota: Literal["loop", "none"] = Field(
        default="loop", description="`loop`: each session's home is a fixed-size ext4 image on a "
                                    "loop device; `none`: a plain volume (rootless engines)")
    disk_quota_mb: int = Field(default=256, ge=8, description="size of a session's home")
    capture_max_entries: int = Field(
        default=100000, ge=1, le=10_000_000,
        description="entries (files, directories, links) a session's home may hold for its "
                    "files to be saved after a command; beyond, the command fails and the files "
                    "stay as they were")
    capture_change_records: bool = Field(
        default=True,
        description="with `loop` volumes, the kernel's record of a home's changes (fanotify, "
                    "root only) tells a capture which directories to scan; `false`: every "
                    "capture walks the whole home")
    capture_max_mb: int = Field(
        default=256, ge=1,
        description="bytes of changed files one command's capture reads (also bounded by "
                    "`PG_SHELL_DISK_QUOTA_MB`); beyond, the command fails and the files stay as "
                    "they were")
    capture_base_s: float = Field(
        default=30.0, gt=0, le=3600,
        description="how long the scan of the home after a command may take; saving the changed "
                    "files gets as long again plus 1 s per `PG_SHELL_CAPTURE_MIN_RATE_KB` KiB")
    capture_min_rate_kb: int = Field(
        default=4096, ge=1,
        description="the slowest rate (KiB/s) at which a command's changed files are saved "
                    "before the capture is given up (the command fails, the files stay as they "
                    "were)")
    volumes_dir: str = Field(default="/var/lib/pg-shell/volumes",
                             description="where the session images (`loop` quota) live")
    volumes_per_user: int = Field(
        default=8, ge=0, le=100000,
        description="idle copies of one user's sessions' files a host keeps: making one more "
                    "removes that user's least recently used copy no command uses (the files are "
                    "in the database); 0: no bound")
    min_free_mb: int = Field(
        default=1024, ge=0,
        description="no new session image (`loop` quota) is made while the volumes directory's "
                    "file system has less free space than this; such a command fails with a "
                    "reason (images are sparse: keep room for what sessions may still write)")
    signing_key_file: str = Field(
        default="/var/lib/pg-shell/signing-key",
        description="the Ed25519 key that signs result records (created, mode 0600, if absent); "
                    "the database only ever sees its public half")
    secrets_key_file: str = Field(
        default="/var/lib/pg-shell/secrets-key",
        description="the OpenPGP key that opens users' secrets (created, mode 0600, if absent; "
                    "its public half is registered for set_secret to encrypt to). Every executor "
                    "needs the same file; empty: this executor runs no command of a session "
                    "that uses secrets")

    # -- `pg-shell cleanup` (signed chain checkpoints keep removed history verifiable)
    retention_days: float = Field(default=90, gt=0,
                                  description="ended commands older than this are removed")
    volume_idle_days: float = Field(default=90, gt=0,
                                    description="session volumes idle this long are deleted")
    loop_idle_minutes: float = Field(
        default=60, gt=0, description="loop devices of sessions idle this long are detached")
    cleanup_interval_s: float = Field(default=3600, gt=0,
                                      description="seconds between rounds of the cleanup daemon")
    retention_batch: int = Field(default=1000, ge=1, le=100000,
                                 description="commands removed per transaction")

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, value: str) -> str:
        proxy_addresses(value)  # a typo must not silently trust nobody (or somebody else)
        return value

    @property
    def shell_root(self) -> str:
        return SHELL_ROOT

    @property
    def trusted_proxy_list(self) -> list[str]:
        return proxy_addresses(self.trusted_proxies)

    def limits(self) -> Limits:
        """The per-command limits these settings give every container."""
        from executor.sandbox.model import Limits  # not at import: the CLI starts without docker

        return Limits(
            timeout_s=self.timeout_s, memory_bytes=self.memory_mb * MiB, pids=self.pids,
            cpus=self.cpus, nofile=self.nofile, fsize_bytes=self.fsize_mb * MiB,
            tmpfs_bytes=self.tmpfs_mb * MiB, output_cap_bytes=self.output_cap_bytes,
            disk_quota_bytes=self.disk_quota_mb * MiB, capture_base_s=self.capture_base_s,
            capture_bytes_per_s=self.capture_min_rate_kb * 1024,
        )

    def sandbox(self) -> Sandbox:
        """The sandbox these settings describe (the executor's, and cleanup's)."""
        from executor.sandbox import Sandbox  # not at import, as above

        return Sandbox(self.limits(), shell_root=self.shell_root, docker_host=self.docker_host,
                       disk_quota=self.disk_quota, volume_dir=self.volumes_dir, scope=self.scope,
                       copies_per_user=self.volumes_per_user,
                       min_free_bytes=self.min_free_mb * 1024 * 1024, runtime=self.runtime)

    def require_database_url(self) -> str:
        if not self.database_url:
            raise ConfigError("DATABASE_URL is not set: give the PostgreSQL connection string, "
                              "e.g. DATABASE_URL=postgresql://user@host:5432/dbname")
        return self.database_url

    def effective_warm_max(self) -> int:
        return 2 * self.concurrency if self.warm_max is None else self.warm_max

    def effective_worker_id(self) -> str:
        """The stable id if configured, else a fresh one for this process."""
        return self.worker_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"


def proxy_addresses(text: str) -> list[str]:
    """PG_SHELL_TRUSTED_PROXIES' addresses and networks, each in its normal
    form; a ValueError names one that is neither."""
    found = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        try:
            found.append(str(ipaddress.ip_network(item, strict=False)) if "/" in item
                         else str(ipaddress.ip_address(item)))
        except ValueError as exc:
            raise ValueError(f"{item!r} is not an IP address or network") from exc
    return found


def setting_variables() -> dict[str, str]:
    """Each environment variable a setting is read from → the setting's field name."""
    names: dict[str, str] = {}
    for field, info in Settings.model_fields.items():
        alias = info.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [f"PG_SHELL_{field}"]
        names.update({str(choice).upper(): field for choice in choices})
    return names


def load_settings(**overrides: object) -> Settings:
    """Reads the environment; a bad value, or a PG_SHELL_* name that is no
    setting, becomes one clear ConfigError. The original pg_shell's names are
    read as aliases, with a warning each."""
    environ = os.environ
    variables = setting_variables()
    environment.refuse_unknown(environ, variables, OPS_ONLY_VARIABLES)
    legacy = environment.read_legacy(environ, variables)
    for warning in legacy.warnings:
        log.warning("%s", warning)
    try:
        return Settings(**{**legacy.values, **overrides})  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(
            f"{legacy.source_of(str(err['loc'][0]))}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"invalid settings: {problems}") from exc
