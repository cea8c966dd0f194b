"""The process environment as the settings see it, checked first.

- The original pg_shell's variables are deprecated aliases of ours: an operator
  coming from it keeps the values they set (`COMMAND_TIMEOUT=5` still means a
  5 s limit), with one warning each naming the new variable. Ours wins when
  both are set. The original's variables that have no counterpart here are
  named as ignored, with the reason, rather than dropped without a word.
- A PG_SHELL_* variable that is neither a setting nor a name the ops scripts
  read is refused, naming the closest valid one: a mistyped limit silently
  left at its default is worse than a daemon that does not start.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from executor.errors import ConfigError

PREFIX = "PG_SHELL_"
# The original's name → our setting's field name.
ALIASES = {
    "PG_CONN": "database_url",
    "COMMAND_TIMEOUT": "timeout_s",
    "COMMAND_LEASE_SECONDS": "lease_s",
    "COMMAND_LEASE_REFRESH_SECONDS": "heartbeat_interval_s",
    "EXECUTOR_WORKER_ID": "worker_id",
    "CLEANUP_DAYS": "retention_days",
    "POLL_INTERVAL": "poll_interval_s",
    "MAX_OUTPUT_BYTES": "output_cap_bytes",
}
# The original's names that nothing here corresponds to, and why.
IGNORED = {
    "SHELL_ROOT": "a session's home is always /home/sandbox inside its own container; "
                  "no host directory is involved",
    "EXECUTOR_USER": "every command runs as uid 1000 in its own container",
    "EXECUTOR_ALLOWED_COMMANDS": "the container is the boundary: any program in the image runs",
    "EXECUTOR_PATH": "the image sets PATH",
    "EXECUTOR_LANG": "the image sets LANG=C.UTF-8",
    "EXECUTOR_LC_ALL": "the image sets the locale",
    "COMMAND_CLAIM_CANDIDATES": "claiming skips busy sessions without a candidate limit",
}
# Settings this project had and dropped: refused with the reason, not a guess.
REMOVED = {
    "PG_SHELL_SHELL_ROOT": "a session's home is always /home/sandbox inside its container",
}


@dataclass
class Legacy:
    """What the original's variables contribute: values by field name, the
    warnings to log, and which variable each value came from."""

    values: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)

    def source_of(self, loc: str) -> str:
        """The variable to name in an error about the field (or alias) `loc`."""
        if loc in self.sources:
            return self.sources[loc]
        name = loc.upper()
        return name if name.startswith(PREFIX) or name == "DATABASE_URL" else PREFIX + name


def read_legacy(environ: Mapping[str, str], variables: Mapping[str, str]) -> Legacy:
    """`variables`: each of our variable names → its field name."""
    legacy = Legacy()
    ours_by_field: dict[str, list[str]] = {}
    for name, field_name in variables.items():
        ours_by_field.setdefault(field_name, []).append(name)
    for old, field_name in ALIASES.items():
        if old not in environ:
            continue
        ours = ours_by_field[field_name]
        set_ours = [name for name in ours if name in environ]
        if set_ours:
            legacy.warnings.append(f"{old} is ignored: {set_ours[0]} is set too "
                                   f"({old} is the original pg_shell's name)")
            continue
        legacy.values[field_name] = environ[old]
        legacy.sources[field_name] = f"{old} (read as {ours[0]})"
        legacy.warnings.append(f"{old} is deprecated: read as {ours[0]}; rename it")
    for old, reason in IGNORED.items():
        if old in environ:
            legacy.warnings.append(f"{old} is ignored: {reason}")
    return legacy


def refuse_unknown(environ: Mapping[str, str], variables: Collection[str],
                   ops_only: Collection[str]) -> None:
    """Raises ConfigError for the first PG_SHELL_* variable that is no setting."""
    known = {*variables, *ops_only}
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper in known:
            continue
        if upper in REMOVED:
            raise ConfigError(f"{name} is no longer a setting: {REMOVED[upper]}; unset it")
        # Compared without the prefix, which every candidate shares.
        settings = sorted(n.removeprefix(PREFIX) for n in variables if n.startswith(PREFIX))
        close = difflib.get_close_matches(upper.removeprefix(PREFIX), settings, n=1, cutoff=0.6)
        hint = f"did you mean {PREFIX}{close[0]}?" if close else "see docs/configuration.md"
        raise ConfigError(f"unknown setting {name}: {hint}")
