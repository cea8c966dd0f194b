"""Removing what a test left on the Docker engine, where the executor may be
removing the same containers at the same moment (it removes each command's
container after the fact, and its warm ones on shutdown).

The engine answers such a race with 404 (already gone) or 409 "removal of
container … is already in progress": both mean the container is going away,
which is what the clean-up wants. Any other error is a real failure and is
raised."""

from __future__ import annotations

import time
from typing import Any

import docker.errors

# How long a removal already in progress may take before the clean-up gives
# up waiting for it: a liveness bound, never a timing claim.
GONE_WITHIN_S = 60.0


def removal_under_way(exc: docker.errors.APIError) -> bool:
    """The engine's answer to removing a container someone else removes."""
    return exc.status_code == 404 or (
        exc.status_code == 409 and "already in progress" in str(exc.explanation))


def remove_container(client: Any, container: Any) -> None:
    """Force-removes ``container``; when another remover is at it, waits until
    the engine no longer lists it (so an image it used can be removed next)."""
    try:
        container.remove(force=True)
        return
    except docker.errors.APIError as exc:
        if not removal_under_way(exc):
            raise
    deadline = time.monotonic() + GONE_WITHIN_S
    while client.containers.list(all=True, sparse=True, filters={"id": container.id}):
        if time.monotonic() > deadline:
            raise AssertionError(f"container {container.id} was still being removed after "
                                 f"{GONE_WITHIN_S:.0f} s")
        time.sleep(0.1)


def remove_labelled(client: Any, label: str) -> None:
    """Every container carrying ``label`` (``key=value``), running or not.
    Sparse and filtered by the engine: inspecting every container on a shared
    engine fails when another run removes one meanwhile."""
    for container in client.containers.list(all=True, sparse=True, filters={"label": label}):
        remove_container(client, container)
