"""Which image new commands start on: PG_SHELL_IMAGE's digest at start-up,
then whatever is promoted in the database (`pg-shell image promote`), as
long as this engine has it. Running commands finish on the image they
started on; a replay runs on its original's image while that image exists."""

from __future__ import annotations

import logging

from executor.db.queue import ClaimedCommand, ExecutorDatabase
from executor.sandbox import ImageNotFound, Sandbox

log = logging.getLogger(__name__)


class ImagePromotion:
    def __init__(self, sandbox: Sandbox, configured: str) -> None:
        self._sandbox = sandbox
        self.current = sandbox.image_digest(configured)
        log.info("sandbox image %s is %s", configured, self.current)
        self._seen: tuple[str, str] | None = None  # (digest, promoted_at) last acted on

    def follow(self, db: ExecutorDatabase) -> None:
        """Switches new commands to the promoted image (one row read per
        round; the engine is asked only when it changed). A promoted image
        this engine lacks is logged once and the old one kept; promoting it
        again after loading it here retries."""
        promotion = db.current_image()
        if promotion is None or promotion == self._seen:
            return
        digest = promotion[0]
        self._seen = promotion
        try:
            resolved = self._sandbox.image_digest(digest) if digest != self.current else digest
        except ImageNotFound:
            log.error("promoted image %s does not exist on this engine: new commands keep "
                      "running on %s", digest, self.current)
            return
        if resolved != self.current:
            log.info("image %s promoted: new commands run on it (was %s)", resolved, self.current)
            self.current = resolved

    def for_command(self, cmd: ClaimedCommand, default: str) -> str:
        """The image ``cmd`` runs on: its original's for a replay while that
        image exists, else ``default`` (the current one when it was claimed)."""
        if cmd.image_digest and cmd.image_digest != default:
            try:
                return self._sandbox.image_digest(cmd.image_digest)
            except ImageNotFound:
                log.info("command_id=%s: image %s is gone, using %s", cmd.command_id,
                         cmd.image_digest, default)
        return default
