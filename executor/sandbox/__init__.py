"""Run commands in locked-down containers.

The only package that imports docker; everything it raises is a
:class:`SandboxError`.
"""

from __future__ import annotations

from .errors import (
    ContainerFailed,
    EngineUnavailable,
    ImageNotFound,
    InvalidSessionId,
    SandboxError,
    VolumeError,
)
from .model import Limits, RunRequest, RunResult
from .runner import Sandbox
from .spec import LABEL_COMMAND, LABEL_SCOPE, LABEL_SESSION, LABEL_WORKER

__all__ = [
    "LABEL_COMMAND",
    "LABEL_SCOPE",
    "LABEL_SESSION",
    "LABEL_WORKER",
    "ContainerFailed",
    "EngineUnavailable",
    "ImageNotFound",
    "InvalidSessionId",
    "Limits",
    "RunRequest",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "VolumeError",
]
