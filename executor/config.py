"""Settings: environment variables with the PG_SHELL_ prefix (and DATABASE_URL),
validated when a command starts, never read at import time."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import AliasChoices, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from executor.errors import ConfigError

if TYPE_CHECKING:
    from executor.sandbox.model import Limits

MiB = 1024 * 1024


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PG_SHELL_", extra="ignore")

    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("PG_SHELL_DATABASE_URL", "DATABASE_URL")
    )
    # The gateway logs in as shell_authenticator (PostgREST's model); without
    # this it uses DATABASE_URL and switches roles per request all the same.
    gateway_database_url: str | None = None
    listen_host: str = "127.0.0.1"
    listen_port: int = Field(default=8080, ge=1, le=65535)
    html_dir: str = str(Path(__file__).resolve().parents[1] / "html")

    # The headless CLI (`pg-shell run`, …): where the HTTP API is, the token
    # (else the one `pg-shell login` saved) and the default session.
    url: str = Field(default="http://127.0.0.1:8080", pattern=r"^https?://[^\s]+$")
    token: str | None = Field(default=None, repr=False)
    session: str | None = None

    # The role the executor acts as after connecting (it needs nothing more).
    executor_role: str = "shell_executor"
    worker_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:@-]{1,200}$")
    concurrency: int = Field(default=4, ge=1, le=256)
    # This host's name for claim affinity: executors sharing one engine and
    # volumes directory share it. Another host leaves a session whose files
    # this host holds for affinity_grace_ms, then takes it.
    host_id: str = Field(default_factory=socket.gethostname, pattern=r"^[A-Za-z0-9_.:@-]{1,200}$")
    affinity_grace_ms: int = Field(default=50, ge=0, le=10000)
    poll_interval_s: float = Field(default=1.0, gt=0, le=60)
    lease_s: int = Field(default=30, ge=5, le=3600)
    heartbeat_interval_s: float = Field(default=5.0, gt=0, le=600)
    reap_interval_s: float = Field(default=60.0, gt=0)
    shutdown_grace_s: float = Field(default=30.0, ge=0)
    output_flush_interval_s: float = Field(default=0.05, gt=0, le=5)

    # Prometheus metrics: the executor serves /metrics on this address (port
    # 0: not at all); it and the gateway read the queue depth this often.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    metrics_interval_s: float = Field(default=5.0, gt=0, le=3600)

    image: str = "pg-shell-sandbox:latest"
    # Deployments (or test runs) sharing one engine need distinct scopes:
    # an executor reaps leftover containers only within its own scope.
    scope: str = Field(default="default", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    docker_host: str | None = None
    allow_rootful: bool = False
    shell_root: str = Field(default="/home/sandbox", pattern=r"^/[A-Za-z0-9_./-]*[A-Za-z0-9_-]$")

    timeout_s: float = Field(default=30.0, gt=0, le=24 * 3600)
    memory_mb: int = Field(default=256, ge=16)
    pids: int = Field(default=128, ge=8)
    cpus: float = Field(default=1.0, gt=0)
    nofile: int = Field(default=256, ge=16)
    fsize_mb: int = Field(default=64, ge=1)
    tmpfs_mb: int = Field(default=16, ge=1)
    output_cap_bytes: int = Field(default=MiB, ge=1024)
    disk_quota: Literal["loop", "none"] = "loop"
    disk_quota_mb: int = Field(default=256, ge=8)
    volumes_dir: str = "/var/lib/pg-shell/volumes"

    # Result records are signed with this Ed25519 key (created, mode 0600, if
    # absent); the database only ever sees its public half.
    signing_key_file: str = "/var/lib/pg-shell/signing-key"

    # `pg-shell cleanup`: ended commands older than this are removed (their
    # chains stay verifiable from a checkpoint); session volumes idle this
    # long are deleted; loop devices of sessions idle this long are detached.
    retention_days: float = Field(default=90, gt=0)
    volume_idle_days: float = Field(default=90, gt=0)
    loop_idle_minutes: float = Field(default=60, gt=0)
    cleanup_interval_s: float = Field(default=3600, gt=0)
    retention_batch: int = Field(default=1000, ge=1, le=100000)

    def limits(self) -> Limits:
        """The per-command limits these settings give every container."""
        from executor.sandbox.model import Limits  # not at import: the CLI starts without docker

        return Limits(
            timeout_s=self.timeout_s, memory_bytes=self.memory_mb * MiB, pids=self.pids,
            cpus=self.cpus, nofile=self.nofile, fsize_bytes=self.fsize_mb * MiB,
            tmpfs_bytes=self.tmpfs_mb * MiB, output_cap_bytes=self.output_cap_bytes,
            disk_quota_bytes=self.disk_quota_mb * MiB,
        )

    def require_database_url(self) -> str:
        if not self.database_url:
            raise ConfigError("DATABASE_URL is not set: give the PostgreSQL connection string, "
                              "e.g. DATABASE_URL=postgresql://user@host:5432/dbname")
        return self.database_url

    def effective_worker_id(self) -> str:
        """The stable id if configured, else a fresh one for this process."""
        return self.worker_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"


def load_settings(**overrides: object) -> Settings:
    """Reads the environment; a bad value becomes one clear ConfigError."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(
            f"PG_SHELL_{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid settings: {problems}") from exc
