"""`pg-shell image`: roll out sandbox images. The database (over
DATABASE_URL, as shell_admin) records which image is current and which
images commands ran on; the engine (through executor.sandbox) holds them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from executor.cli import Commands
from executor.config import Settings
from executor.db import images as db_images
from executor.db.database import as_admin
from executor.errors import PgShellError


def register(commands: Commands) -> None:
    image = commands.add_parser(
        "image", help="roll out and build sandbox images and templates (over DATABASE_URL "
                      "and the Docker engine)",
        description="Build and promote sandbox images (one current image per template), define "
                    "templates, list images and what ran on them, prune old ones. Running "
                    "executors start new commands on the promoted image within one "
                    "maintenance round (PG_SHELL_HEARTBEAT_INTERVAL_S); running commands finish on "
                    "the image they started on.")
    actions = image.add_subparsers(dest="image_command", metavar="ACTION", required=True)
    promote = actions.add_parser(
        "promote", help="make an image the current one of a template",
        description="Record the image (an id, sha256:…, or a repo:tag on this engine) as the "
                    "current one of a template (default base). It must exist on this engine "
                    "(load it on every executor's engine first) and pass the checks: its "
                    "supervisor speaks this release's protocol, it has the sandbox user's home, "
                    "and no set-uid or set-gid file.",
        epilog="examples:\n  pg-shell image promote $(ops/build-sandbox-image | tail -1)\n"
               "  pg-shell image template dev --description 'git, gcc, node' --open\n"
               "  pg-shell image promote --template dev pg-shell-sandbox:dev",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    promote.add_argument("image", metavar="DIGEST")
    promote.add_argument("--template", default="base", metavar="NAME",
                         help="the template it becomes the image of (default base; define it "
                              "first with `pg-shell image template`)")
    promote.set_defaults(handler=cmd_promote)
    template = actions.add_parser(
        "template", help="define a template, or change its description or who may use it",
        description="Create a template (a name sessions are made on: `pg-shell new --template "
                    "NAME`), or change an existing one. A template is usable once an image was "
                    "promoted for it; --open lets every user use it, else only the users "
                    "`pg-shell user templates` names. Build its image with "
                    "`ops/build-sandbox-image NAME` (sandbox-image/templates/NAME).")
    template.add_argument("name", metavar="NAME")
    template.add_argument("--description", help="one line tenants see in the template list")
    opened = template.add_mutually_exclusive_group()
    opened.add_argument("--open", dest="is_open", action="store_true", default=None,
                        help="every user may use it")
    opened.add_argument("--closed", dest="is_open", action="store_false",
                        help="only users granted it may use it (the default for a new one)")
    template.set_defaults(handler=cmd_template)
    listing = actions.add_parser(
        "list", help="images on the engine and/or promoted, with how many commands ran on each",
        description="Every image of the repository on this engine, every promoted image and every "
                    "image a retained command ran on.")
    listing.add_argument("--repository", help="the engine repository (default: PG_SHELL_IMAGE's, "
                                              "else pg-shell-sandbox)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(handler=cmd_list)
    prune = actions.add_parser(
        "prune", help="remove images no retained command may be replayed on",
        description="Remove the repository's images on this engine that no retained command ran on "
                    "(a replay runs on its original's image while it exists) and that are not "
                    "current (nor PG_SHELL_IMAGE). --force removes used ones too, never the "
                    "current one. Only tags in the repository are removed; an image also tagged "
                    "elsewhere, or used by a container, stays.")
    prune.add_argument("--repository", help="as for list")
    prune.add_argument("--force", action="store_true", help="also remove images commands ran on")
    prune.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    prune.set_defaults(handler=cmd_prune)
    build = actions.add_parser(
        "build", help="build the sandbox image, or a template's, from the files installed "
                      "with pg-shell",
        description="Build the image every command runs in (a debootstrap'd base, then the "
                    "Dockerfile shipped with pg-shell) unless an identical one exists; with "
                    "--template, then the template's image FROM it. Print its id last. Needs "
                    "root and debootstrap for the base. Promote it afterwards.")
    build.add_argument("--template", default="base", metavar="NAME",
                       help="a shipped template (dev, python-data) or a directory with a "
                            "Dockerfile (default base)")
    build.set_defaults(handler=cmd_build)


def _engine(settings: Settings) -> Any:
    from executor.sandbox import Images  # imports docker: only when needed

    return Images(settings.docker_host)


def _repository(args: argparse.Namespace, settings: Settings) -> str:
    from executor.sandbox import DEFAULT_REPOSITORY, repository_of

    return args.repository or repository_of(settings.image) or DEFAULT_REPOSITORY


def _engine_errors_as_ours(handler: Any) -> Any:
    """The engine's errors end as one clear line, like the database's."""

    def wrapped(args: argparse.Namespace, settings: Settings) -> int:
        from executor.sandbox import SandboxError

        try:
            return int(handler(args, settings))
        except SandboxError as exc:
            raise PgShellError(f"Docker engine: {exc}") from exc

    return wrapped


@_engine_errors_as_ours
def cmd_promote(args: argparse.Namespace, settings: Settings) -> int:
    from executor.sandbox import ImageNotFound

    engine = _engine(settings)
    try:
        found = engine.resolve(args.image)
    except ImageNotFound as exc:
        raise PgShellError(f"{exc}: not promoted (build or load it on every executor's engine "
                           "first)") from exc
    problems = engine.problems(found)
    if problems:
        raise PgShellError(f"image {found.digest} is not promoted: {'; '.join(problems)}")
    with as_admin(settings.require_database_url(), "image promote") as db:
        row = db_images.promote(db, found.digest, args.template, found.size)
    previous = row["previous"]
    print(f"promoted {found.digest}" + (f" ({', '.join(found.tags)})" if found.tags else "")
          + f" for template {row['template']}"
          + (f", replacing {previous}" if previous and previous != found.digest else ""))
    return 0


def cmd_template(args: argparse.Namespace, settings: Settings) -> int:
    with as_admin(settings.require_database_url(), "image template") as db:
        row = db_images.define_template(db, args.name, args.description, args.is_open)
    who = "open to every user" if row["is_open"] else "for users granted it"
    print(f"template {row['name']}: {who}" + (f"; {row['description']}" if row["description"]
                                               else ""))
    return 0


def _rows(args: argparse.Namespace, settings: Settings) -> tuple[str, list[dict[str, Any]]]:
    """Engine images of the repository joined with the database's usage."""
    repository = _repository(args, settings)
    engine = _engine(settings)
    with as_admin(settings.require_database_url(), "image list") as db:
        usage = {u["digest"]: u for u in db_images.usage(db)}
    on_engine = {i.digest: i for i in engine.in_repository(repository)}
    rows = []
    for digest in list(on_engine) + [d for d in usage if d not in on_engine]:
        image = on_engine.get(digest)
        if image is None and engine.exists(digest):  # present, but not tagged in the repository
            image = engine.resolve(digest)
        used = usage.get(digest, {})
        rows.append({
            "digest": digest,
            "tags": list(image.tags) if image else [],
            "on_engine": image is not None,
            "in_repository": digest in on_engine,
            "created": _iso(image.created) if image else None,
            "template": used.get("template"),
            "promoted_at": _text(used.get("promoted_at")),
            "current": bool(used.get("is_current")),
            "commands": int(used.get("commands") or 0),
            "last_used_at": _text(used.get("last_used_at")),
        })
    return repository, rows


@_engine_errors_as_ours
def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    repository, rows = _rows(args, settings)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    if not rows:
        print(f"no images: nothing in {repository} on this engine, nothing promoted or used")
        return 0
    print(f"{'':1} {'IMAGE':19} {'TEMPLATE':12} {'ENGINE':6} {'COMMANDS':>8}  {'PROMOTED':25} "
          "TAGS")
    for row in rows:
        print(f"{'*' if row['current'] else ' ':1} {row['digest'][:19]:19} "
              f"{(row['template'] or '-')[:12]:12} {'yes' if row['on_engine'] else 'gone':6} "
              f"{row['commands']:>8}  {(row['promoted_at'] or '-')[:25]:25} "
              f"{', '.join(row['tags']) or '-'}")
    if any(row["current"] for row in rows):
        print("* current (its template's new commands run on it)")
    return 0


@_engine_errors_as_ours
def cmd_prune(args: argparse.Namespace, settings: Settings) -> int:
    from executor.sandbox import ImageNotFound, SandboxError

    repository, rows = _rows(args, settings)
    engine = _engine(settings)
    configured = None
    try:
        configured = engine.resolve(settings.image).digest
    except ImageNotFound:
        pass
    failed = 0
    for row in rows:
        if not row["in_repository"]:
            continue
        keep = None
        if row["current"]:
            keep = "current"
        elif row["digest"] == configured:
            keep = f"PG_SHELL_IMAGE ({settings.image})"
        elif row["commands"] and not args.force:
            keep = f"{row['commands']} retained commands ran on it (--force removes it)"
        if keep:
            print(f"kept    {row['digest']}: {keep}")
            continue
        if args.dry_run:
            print(f"would remove {row['digest']} ({', '.join(row['tags'])})")
            continue
        image = next(i for i in engine.in_repository(repository) if i.digest == row["digest"])
        try:
            removed = engine.remove_from(image, repository)
        except SandboxError as exc:
            print(f"failed  {row['digest']}: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"removed {row['digest']} ({', '.join(removed)})")
    return 1 if failed else 0


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _text(value: Any) -> str | None:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value) if value is not None else None


def cmd_build(args: argparse.Namespace, settings: Settings) -> int:
    """Runs the shipped ops/build-sandbox-image on the shipped build context."""
    import subprocess

    from executor.resources import resource_dir

    script = resource_dir("ops/build-sandbox-image")
    env = dict(os.environ)
    if settings.docker_host:  # the engine the executor uses, as the docker CLI spells it
        env["DOCKER_HOST"] = settings.docker_host
    return subprocess.run(["bash", str(script), args.template], env=env, check=False).returncode
