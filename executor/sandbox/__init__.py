"""Run commands in locked-down containers.

The only package that imports docker; everything it raises is a
:class:`SandboxError`.
"""

from __future__ import annotations

from .containers import Started
from .errors import (
    ContainerFailed,
    EngineUnavailable,
    ImageNotFound,
    InvalidSessionId,
    SandboxError,
    VolumeError,
)
from .images import DEFAULT_REPOSITORY, EngineImage, Images, repository_of
from .model import Interaction, Limits, RunRequest, RunResult
from .runner import Blank, Sandbox
from .spec import LABEL_COMMAND, LABEL_SCOPE, LABEL_SESSION, LABEL_WORKER

__all__ = [
    "Blank",
    "DEFAULT_REPOSITORY",
    "LABEL_COMMAND",
    "LABEL_SCOPE",
    "LABEL_SESSION",
    "LABEL_WORKER",
    "ContainerFailed",
    "EngineImage",
    "EngineUnavailable",
    "ImageNotFound",
    "Images",
    "InvalidSessionId",
    "Interaction",
    "Limits",
    "RunRequest",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "Started",
    "VolumeError",
    "repository_of",
]
