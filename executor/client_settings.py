"""The settings of the tenant's commands (`pg-shell run`, `tail`, `files`, …):
where the API is, the token, the default session. They are read without
pydantic when they are all the environment sets, because importing it and
validating every setting costs several times what `pg-shell run` asks of a
gateway on the same machine.

Any other PG_SHELL_* variable in the environment (an executor's settings,
or a typo) sends the reading through executor.config's load_settings as for
every other command: each setting is validated and an unknown name refused,
exactly as before. The three fields here are declared there (config.Settings)
with these defaults, so docs/configuration.md lists them."""

from __future__ import annotations

import os
import re

from executor.errors import ConfigError

TYPE_CHECKING = False  # `typing` is not needed at run time (see executor/cli/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_URL = "http://127.0.0.1:8080"
URL_PATTERN = r"^https?://[^\s]+$"
# Each variable the client reads → its field in config.Settings.
CLIENT_VARIABLES = {"PG_SHELL_URL": "url", "PG_SHELL_TOKEN": "token",
                    "PG_SHELL_SESSION": "session"}


class ClientSettings:
    """PG_SHELL_URL, PG_SHELL_TOKEN (unset: the one `pg-shell login` saved)
    and PG_SHELL_SESSION (unset: the most recently active session)."""

    __slots__ = ("url", "token", "session")

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None,
                 session: str | None = None) -> None:
        self.url = url
        self.token = token
        self.session = session


def load_client_settings(environ: Mapping[str, str] | None = None) -> ClientSettings:
    """The client's settings; ConfigError for a bad one (or, through
    load_settings, for any bad or unknown PG_SHELL_* variable)."""
    environ = os.environ if environ is None else environ
    if any(name.upper().startswith("PG_SHELL_") and name not in CLIENT_VARIABLES
           for name in environ):
        from executor.config import load_settings

        full = load_settings()
        return ClientSettings(full.url, full.token, full.session)
    url = environ.get("PG_SHELL_URL", DEFAULT_URL)
    if not re.fullmatch(URL_PATTERN, url):
        # As load_settings words it (pydantic's message).
        raise ConfigError(f"invalid settings: PG_SHELL_URL: String should match pattern "
                          f"'{URL_PATTERN}'")
    return ClientSettings(url, environ.get("PG_SHELL_TOKEN"), environ.get("PG_SHELL_SESSION"))
