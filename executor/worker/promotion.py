"""Which image new commands start on, per template: base's is
PG_SHELL_IMAGE's digest at start-up, then whatever is promoted in the
database (`pg-shell image promote`), as long as this engine has it; another
template's is its promoted image. Running commands finish on the image they
started on; a replay runs on its original's image while that image exists."""

from __future__ import annotations

import logging

from executor.db.queue import ClaimedCommand, ExecutorDatabase
from executor.sandbox import ImageNotFound, Sandbox

log = logging.getLogger(__name__)

BASE = "base"


class ImagePromotion:
    def __init__(self, sandbox: Sandbox, configured: str) -> None:
        self._sandbox = sandbox
        self.current = sandbox.image_digest(configured)  # base's
        log.info("sandbox image %s is %s", configured, self.current)
        self._templates: dict[str, str] = {}  # the other templates' images on this engine
        self._seen: list[tuple[str, str, str]] | None = None  # the promotions last acted on

    def follow(self, db: ExecutorDatabase) -> None:
        """Switches new commands to the promoted images (one query per
        round; the engine is asked only when they changed). A promoted image
        this engine lacks is logged and the template keeps the image it had
        here (none: its commands fail, saying so); promoting it again after
        loading it here retries."""
        promotions = db.current_images()
        if promotions == self._seen:
            return
        self._seen = promotions
        templates: dict[str, str] = {}
        for template, digest, _promoted_at in promotions:
            had = self.of_template(template)
            resolved: str | None = digest
            try:
                if digest != had:
                    resolved = self._sandbox.image_digest(digest)
            except ImageNotFound:
                log.error("template %s: promoted image %s does not exist on this engine; its new "
                          "commands keep running on %s", template, digest, had)
                resolved = had
            if resolved is not None and resolved != had:
                log.info("template %s: image %s promoted (was %s)", template, resolved, had)
            if template == BASE:
                self.current = resolved or self.current
            elif resolved is not None:
                templates[template] = resolved
        self._templates = templates

    def of_template(self, template: str) -> str | None:
        """The image a new command of ``template`` starts on here (None: none here)."""
        return self.current if template == BASE else self._templates.get(template)

    def templates(self) -> list[str]:
        """The templates this host has an image for."""
        return [BASE, *self._templates]

    def images(self) -> set[str]:
        """Every template's current image here."""
        return {self.current, *self._templates.values()}

    def for_command(self, cmd: ClaimedCommand, default: str) -> str:
        """The image ``cmd`` runs on: its original's for a replay while that
        image exists, else ``default`` (its template's current one when it was claimed)."""
        if cmd.image_digest and cmd.image_digest != default:
            try:
                return self._sandbox.image_digest(cmd.image_digest)
            except ImageNotFound:
                log.info("command_id=%s: image %s is gone, using %s", cmd.command_id,
                         cmd.image_digest, default)
        return default
