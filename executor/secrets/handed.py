"""The secrets a claimed command gets: opened with the executor's key, or a
reason it cannot run that its record will state."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from .key import SecretsKey

# A command's environment goes to its container in one request frame and to
# its shell through execve, which takes a few MiB at most: the secrets of a
# session are held well under both.
MAX_TOTAL_BYTES = 256 * 1024


class SecretsUnavailable(Exception):
    """The command cannot get its secrets; the message says why."""


def open_secrets(key: SecretsKey | None, handed: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Name → value of each secret handed with the claim."""
    values: dict[str, str] = {}
    for secret in handed:
        name = secret["name"]
        if secret["version"] is None:
            raise SecretsUnavailable(
                f"secret {name} is not set: the session names it, but it was deleted "
                "(set it again, or take it off the session)")
        if key is None:
            raise SecretsUnavailable(
                "the session uses secrets, and this executor holds no key to open them "
                "(PG_SHELL_SECRETS_KEY_FILE is empty)")
        if secret["key"] != key.fingerprint:
            raise SecretsUnavailable(
                f"secret {name} is encrypted to key {secret['key']}, which this executor does "
                f"not hold (it holds {key.fingerprint}): give every executor the same "
                "PG_SHELL_SECRETS_KEY_FILE")
        try:
            values[name] = key.decrypt(base64.b64decode(secret["value"]))
        except ValueError as exc:
            raise SecretsUnavailable(f"secret {name} could not be decrypted: {exc}") from exc
    total = sum(len(n.encode()) + len(v.encode()) for n, v in values.items())
    if total > MAX_TOTAL_BYTES:
        raise SecretsUnavailable(
            f"the session's secrets take {total} bytes, more than the {MAX_TOTAL_BYTES} a "
            "command's environment may hold: take some off the session")
    return values
