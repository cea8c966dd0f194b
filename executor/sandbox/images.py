"""The sandbox images on an engine, for `pg-shell image …`: resolve a
reference to its immutable id, check it before a promotion, list one
repository's images, remove tags.

Only images tagged in the given repository are ever listed or removed, so
other images on a shared engine are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import docker
import docker.errors

from .engine import ENGINE_ERRORS, connect, engine_error
from .errors import ImageNotFound, SandboxError
from .image_check import image_problems

DEFAULT_REPOSITORY = "pg-shell-sandbox"


@dataclass(frozen=True)
class EngineImage:
    digest: str  # the image id, sha256:…
    tags: tuple[str, ...]  # repo:tag, all repositories
    created: int  # seconds since the epoch
    size: int  # bytes


def repository_of(reference: str) -> str | None:
    """``pg-shell-sandbox`` for ``pg-shell-sandbox:latest``; None for an id."""
    if reference.startswith("sha256:"):
        return None
    name = reference.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return name


class Images:
    def __init__(self, docker_host: str | None = None) -> None:
        self._client = connect(docker_host)
        self._api = self._client.api

    def close(self) -> None:
        self._client.close()

    def resolve(self, reference: str) -> EngineImage:
        """The image ``reference`` (an id, a digest or repo:tag) names on this engine."""
        try:
            info = self._api.inspect_image(reference)
        except docker.errors.ImageNotFound as exc:
            raise ImageNotFound(f"image {reference} does not exist on this Docker engine") from exc
        except docker.errors.APIError as exc:
            if exc.status_code in (400, 404):  # a malformed reference names no image either
                raise ImageNotFound(f"image {reference} does not exist on this Docker engine: "
                                    f"{exc.explanation}") from exc
            raise engine_error(exc, f"inspect image {reference}") from exc
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, f"inspect image {reference}") from exc
        return EngineImage(str(info["Id"]), tuple(info.get("RepoTags") or ()),
                           _created(info.get("Created")), int(info.get("Size") or 0))

    def problems(self, image: EngineImage) -> list[str]:
        """Why ``image`` may not be promoted (empty: it may); see image_check."""
        return image_problems(self._client, image.digest)

    def exists(self, digest: str) -> bool:
        try:
            self.resolve(digest)
        except ImageNotFound:
            return False
        return True

    def in_repository(self, repository: str) -> list[EngineImage]:
        """Images with at least one tag in ``repository``, newest first."""
        try:
            rows = self._api.images(name=repository)
        except ENGINE_ERRORS as exc:
            raise engine_error(exc, f"list images of {repository}") from exc
        images = [EngineImage(str(r["Id"]),
                              tuple(t for t in r.get("RepoTags") or () if t != "<none>:<none>"),
                              int(r.get("Created") or 0), int(r.get("Size") or 0)) for r in rows]
        return sorted(images, key=lambda i: i.created, reverse=True)

    def remove_from(self, image: EngineImage, repository: str) -> list[str]:
        """Removes the image's tags in ``repository`` (never by force): the
        engine deletes the image with its last tag, and refuses while a
        container uses it. Returns the tags removed."""
        removed = []
        for tag in image.tags:
            if repository_of(tag) != repository:
                continue
            try:
                self._api.remove_image(tag, force=False, noprune=False)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as exc:
                raise SandboxError(f"cannot remove {tag}: {exc.explanation or exc}") from exc
            except ENGINE_ERRORS as exc:
                raise engine_error(exc, f"remove image {tag}") from exc
            removed.append(tag)
        return removed


def _created(value: object) -> int:
    """inspect gives an RFC 3339 string, the image list seconds."""
    if isinstance(value, (int, float)):
        return int(value)
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(str(value)[:26].rstrip("Z") + "+00:00").timestamp())
    except ValueError:
        return 0
