"""The executor's side of the database contract: claim, heartbeat, start,
output, complete, expire and settle, on a retrying Database."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from executor.audit.records import ChainPosition, SignedRecord
from executor.db.database import Connector, Database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimedCommand:
    command_id: int
    session_id: str
    user_id: str
    command: str
    cwd: str
    env: dict[str, str]
    attempt: int
    image_digest: str | None
    root: str | None = None  # the session's files when claimed (None: from before the workspace)
    upload: dict[str, Any] | None = None  # an upload to apply instead of a command to run
    template: str = "base"  # the session's: which image family it runs on
    runtime: str | None = None  # its user's container runtime (None: the executor's default)
    # The secrets its session names (shell.session_secrets): name, version,
    # key and ciphertext of each.
    secrets: list[dict[str, Any]] = field(default_factory=list, repr=False)


@dataclass(frozen=True)
class HostSession:
    """A session a host may hold a copy of, as the database sees it."""

    session_id: str
    user_id: str
    archived: bool
    stored: bool  # its files are in the database (the copy is only a cache)
    template: str
    runtime: str | None  # its user's container runtime (None: the executor's default)


def queue_depth(db: Connector) -> int:
    """Pending commands of all tenants (the executor's and the gateway's metrics)."""
    return int(db.call("SELECT shell.queue_depth() AS n")[0]["n"])


class ExecutorDatabase(Database):
    """The executor's calls, on one connection acting as the executor role."""

    # -- the contract -------------------------------------------------------

    def claim(self, worker_id: str, limit: int, lease_s: int, host: str | None = None,
              grace_ms: int = 0, templates: list[str] | None = None,
              template_wait_ms: int = 0) -> list[ClaimedCommand]:
        """``templates``: those this host has an image for (None: all); a
        session of another is left to other hosts for ``template_wait_ms``."""
        rows = self.call("SELECT * FROM shell.claim_commands(%s, %s, %s, %s, %s, %s, %s)",
                         (worker_id, limit, lease_s, host, grace_ms, templates, template_wait_ms))
        return [ClaimedCommand(**row) for row in rows]

    def secrets_key_in_use(self) -> str | None:
        """The fingerprint of the key the newest stored secret is encrypted to."""
        found = self.call("SELECT shell.secrets_key_in_use() AS k")[0]["k"]
        return None if found is None else str(found)

    def register_secrets_key(self, fingerprint: str, public_key: str) -> None:
        """set_secret encrypts to this key from now on."""
        self.call("SELECT shell.register_secrets_key(%s, %s)", (fingerprint, public_key))

    def heartbeat(self, worker_id: str, held: dict[int, int], lease_s: int) -> dict[int, bool]:
        """Renews the leases in ``held`` (command id → attempt); returns the
        ones still held, each with whether a cancel was requested."""
        rows = self.call(
            "SELECT * FROM shell.heartbeat(%s, %s::bigint[], %s::integer[], %s)",
            (worker_id, list(held), list(held.values()), lease_s),
        )
        return {r["command_id"]: r["cancel_requested"] for r in rows}

    def mark_created(self, cmd: ClaimedCommand, worker_id: str, container_id: str) -> None:
        self.call("SELECT shell.mark_created(%s, %s, %s, %s)",
                  (cmd.command_id, worker_id, cmd.attempt, container_id))

    def mark_started(self, cmd: ClaimedCommand, worker_id: str, container_id: str,
                     image_digest: str, runtime: str) -> None:
        self.call("SELECT shell.mark_started(%s, %s, %s, %s, %s, %s)",
                  (cmd.command_id, worker_id, cmd.attempt, container_id, image_digest, runtime))

    def append_output(self, cmd: ClaimedCommand, worker_id: str, seq: int, data: str,
                      notify: bool = True) -> None:
        """``data`` holds no NUL (OutputWriter replaces it, where it hashes);
        ``notify`` False stores it without waking listeners (announce_output)."""
        self.call("SELECT shell.append_output(%s, %s, %s, %s, %s, %s)",
                  (cmd.command_id, worker_id, cmd.attempt, seq, data, notify))

    def announce_output(self, cmd: ClaimedCommand, worker_id: str) -> None:
        """Wakes the session's listeners for output appended quietly."""
        self.call("SELECT shell.announce_output(%s, %s, %s)",
                  (cmd.command_id, worker_id, cmd.attempt))

    def complete(self, cmd: ClaimedCommand, worker_id: str,
                 sign: Callable[[ChainPosition], SignedRecord]) -> None:
        """Ends the command as the record ``sign`` builds states. One
        transaction reads the link's chain position (locking the session's
        chain), has the record signed with it, and completes: no other link
        can take that position in between."""
        def work(cur: Any) -> None:
            cur.execute("SELECT * FROM shell.chain_position(%s, %s, %s)",
                        (cmd.command_id, worker_id, cmd.attempt))
            row = cur.fetchone()
            signed = sign(ChainPosition(int(row["chain_seq"]), str(row["chain_prev"])))
            cur.execute("SELECT shell.complete_command(%s, %s, %s, %s, %s, %s)",
                        (cmd.command_id, worker_id, cmd.attempt, signed.text, signed.signature,
                         signed.key_id))

        self.transact(work)

    def ended_containers(self, container_ids: list[str]) -> set[str]:
        """Those of the containers that ran a command which has ended."""
        rows = self.call("SELECT c AS id FROM shell.ended_containers(%s) AS c", (container_ids,))
        return {str(r["id"]) for r in rows}

    def adopt_session(self, session_id: str, host: str) -> bool:
        """Whether this host now is the one claiming prefers for a new session."""
        rows = self.call("SELECT shell.adopt_session(%s, %s) AS adopted", (session_id, host))
        return bool(rows[0]["adopted"])

    def host_sessions(self, session_ids: list[str]) -> list[HostSession]:
        """What the database says of these sessions (those it knows)."""
        rows = self.call("SELECT session_id::text AS session_id, user_id::text AS user_id, "
                         "archived, stored, template, runtime FROM shell.host_sessions(%s::uuid[])",
                         (session_ids,))
        return [HostSession(**row) for row in rows]

    def publish_time_limit(self, seconds: float) -> None:
        """Tells the page the limit a running command's elapsed time counts against."""
        self.call("SELECT shell.publish_time_limit(%s)", (seconds,))

    def expire_leases(self) -> list[dict[str, Any]]:
        return self.call("SELECT * FROM shell.expire_leases()")

    def settle_worker(self, worker_id: str, started_ids: list[int]) -> list[dict[str, Any]]:
        return self.call("SELECT * FROM shell.settle_worker(%s, %s::bigint[])",
                         (worker_id, started_ids))

    def live_commands(self, command_ids: list[int]) -> set[int]:
        rows = self.call("SELECT id FROM shell.live_commands(%s::bigint[]) AS id", (command_ids,))
        return {r["id"] for r in rows}

    def current_images(self) -> list[tuple[str, str, str]]:
        """Each template's promoted image: (template, digest, promoted_at as text)."""
        rows = self.call("SELECT template, digest, promoted_at::text AS promoted_at "
                         "FROM shell.current_images()")
        return [(str(r["template"]), str(r["digest"]), str(r["promoted_at"])) for r in rows]
