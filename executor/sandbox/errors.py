"""Exceptions raised by the sandbox runner.

Every docker (and losetup/mkfs) failure leaves this package as one of these,
chained with ``raise … from`` so the original stays in the traceback.
"""

from __future__ import annotations

from executor.errors import PgShellError


class SandboxError(PgShellError):
    """The sandbox could not run a command.

    Base of everything this package raises.
    """

    default_message = "sandbox failure"

    def __init__(self, message: str | None = None, *, container_id: str | None = None) -> None:
        super().__init__(message or self.default_message)
        self.container_id = container_id


class EngineUnavailable(SandboxError):
    """The Docker engine did not answer (transient: retry with backoff)."""

    default_message = "the Docker engine is not reachable"


class ImageNotFound(SandboxError):
    """The sandbox image is not present on this engine."""

    default_message = "the sandbox image is not present on this Docker engine"


class ContainerFailed(SandboxError):
    """Docker refused to create, start or wait for a command's container.

    ``container_id`` is set when a container exists and must still be removed.
    """

    default_message = "the command's container could not be run"


class VolumeError(SandboxError):
    """A session volume (loop-backed ext4 image or Docker volume) failed."""

    default_message = "the session volume could not be prepared"


class InvalidSessionId(SandboxError):
    """A session id cannot be used in a volume name or file name."""

    default_message = "invalid session id"
