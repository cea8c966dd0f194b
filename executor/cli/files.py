"""`pg-shell files`, `cp`, `changes` and `export`: a session's files, which
live in PostgreSQL (DESIGN.md §9), listed, copied in and out, diffed per
command and exported as a tar archive. Paths are relative to the session's
home; the server validates them (no absolute paths, no `..`)."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, BinaryIO

from executor.api_client import ApiClient
from executor.cli import Commands
from executor.cli.client import add_command, api, session_of
from executor.client_settings import ClientSettings
from executor.errors import ApiError, PgShellError

_KIND_BITS = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK}
_CHANGE_MARKS = {"added": "+", "modified": "~", "deleted": "-"}
_SESSION_HELP = "session id (default: PG_SHELL_SESSION, else your most recently active session)"
_AT_HELP = "as right after this command (its id)"

FILES = """List the files, directories and symbolic links in a session's home, as they are
now or, with --at, right after a command: mode, size in bytes, path (and `-> target` for a
link). A directory's size is that of everything in it."""
CP = """Copy one file between a session and here. The side written SESSION:PATH is in the
session (PATH relative to its home; `:PATH` means the default session: PG_SHELL_SESSION,
else your most recently active one); the other side is local, `-` meaning stdout or stdin.
As in scp, a colon after a slash is part of a local name (write ./a:b). Copying into a
directory (either way; in the session, also a PATH ending in /) keeps the file's name. An
upload keeps the local file's permission bits (0644 from stdin), replaces a file already at
PATH, creates the directories above it, and is recorded in the session's history; it is
refused while the session has queued or running commands."""
CHANGES = """One line per path that COMMAND (a command's or an upload's id) added (+), modified
(~) or deleted (-); a directory ends in /. Nothing is printed for a command that changed
nothing or has not finished yet."""
EXPORT = """Write the whole tree of a session's home (now, or right after a command with --at)
to stdout as a tar archive: files with their contents and modes, directories, symbolic
links. The workspace keeps no timestamps: every entry carries the time of the export. Each
file is checked against the listing's SHA-256, so an archive is never a mix of two states
(if a command changes the files meanwhile, export fails: run it again, or use --at). stdout
must not be a terminal."""


def register(commands: Commands) -> None:
    files = add_command(commands, "files", "list a session's files", FILES,
                        "  pg-shell files\n  pg-shell files 3f2c… --at 42\n"
                        "  pg-shell files --json | jq -r '.[] | select(.kind == \"file\") | .path'")
    files.add_argument("session", nargs="?", metavar="SESSION", help=_SESSION_HELP)
    files.add_argument("--at", type=int, metavar="COMMAND", help=_AT_HELP)
    files.add_argument("--json", action="store_true",
                       help="print JSON (path, kind, mode, size, sha256, target)")
    files.set_defaults(handler=cmd_files)

    cp = add_command(commands, "cp", "copy a file out of or into a session", CP,
                     "  pg-shell cp 3f2c…:src/main.py .\n"
                     "  pg-shell cp 3f2c…:out.png - | display\n"
                     "  pg-shell cp --at 42 3f2c…:log.txt log-42.txt\n"
                     "  pg-shell cp build.sh 3f2c…:bin/\n"
                     "  curl -s https://example.org/data.csv | pg-shell cp - :data.csv")
    cp.add_argument("source", metavar="SOURCE", help="SESSION:PATH, or a local file (- for stdin)")
    cp.add_argument("destination", metavar="DEST",
                    help="a local file or directory (- for stdout), or SESSION:PATH")
    cp.add_argument("--at", type=int, metavar="COMMAND",
                    help="download the file as it was right after this command (its id)")
    cp.set_defaults(handler=cmd_cp)

    changes = add_command(commands, "changes", "what a command changed in its session's files",
                          CHANGES,
                          "  pg-shell changes 42\n  pg-shell changes 42 --json | jq -r '.[].path'")
    changes.add_argument("command_id", type=int, metavar="COMMAND", help="the command's id")
    changes.add_argument("--json", action="store_true",
                         help="print JSON (path, change, kind, size)")
    changes.set_defaults(handler=cmd_changes)

    export = add_command(commands, "export", "write a session's files to stdout as a tar archive",
                         EXPORT,
                         "  pg-shell export > home.tar\n"
                         "  pg-shell export 3f2c… --at 42 | tar -tvf -\n"
                         "  pg-shell export | gzip > home.tar.gz")
    export.add_argument("session", nargs="?", metavar="SESSION", help=_SESSION_HELP)
    export.add_argument("--at", type=int, metavar="COMMAND", help=_AT_HELP)
    export.set_defaults(handler=cmd_export)


# -- files ----------------------------------------------------------------------------


def cmd_files(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        rows = client.session_files(session_of(args, settings, client), args.at)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max((len(str(row["size"])) for row in rows), default=0)
    for row in rows:
        link = f" -> {row['target']}" if row["kind"] == "symlink" else ""
        print(f"{filemode(row)}  {row['size']:>{width}}  {row['path']}{link}")
    return 0


def filemode(row: dict[str, Any]) -> str:
    """ls's mode string, e.g. -rw-r--r--, drwxr-xr-x, lrwxrwxrwx."""
    return stat.filemode(_KIND_BITS[row["kind"]] | row["mode"])


# -- cp -------------------------------------------------------------------------------


def remote(argument: str) -> tuple[str, str] | None:
    """(session, path) for SESSION:PATH (a colon before any slash), else None."""
    session, colon, path = argument.partition(":")
    if not colon or "/" in session:
        return None
    return session, path


def cmd_cp(args: argparse.Namespace, settings: ClientSettings) -> int:
    source, destination = remote(args.source), remote(args.destination)
    if (source is None) == (destination is None):
        which = "neither" if source is None else "both"
        raise PgShellError(f"cp copies between a session and here: name the session on exactly "
                           f"one side (pg-shell cp SESSION:PATH LOCAL, or pg-shell cp LOCAL "
                           f"SESSION:PATH); {which} of {args.source!r} and {args.destination!r} "
                           f"did")
    if destination is not None and args.at is not None:
        raise PgShellError("--at reads a file as it was: it applies to downloads only")
    with api(settings) as client:
        if source is not None:
            download(client, settings, source, args.destination, args.at)
        else:
            assert destination is not None
            upload(client, settings, args.source, destination)
    return 0


def _session(client: ApiClient, settings: ClientSettings, named: str) -> str:
    return session_of(argparse.Namespace(session=named or None), settings, client)


def download(client: ApiClient, settings: ClientSettings, source: tuple[str, str], local: str,
             at: int | None) -> None:
    session, path = source
    content = client.read_file(_session(client, settings, session), path, at)
    if local == "-":
        sys.stdout.buffer.write(content)
        sys.stdout.buffer.flush()
        return
    target = Path(local)
    if target.is_dir():
        target = target / Path(path).name
    try:
        target.write_bytes(content)
    except OSError as exc:
        raise PgShellError(f"cannot write {target}: {exc.strerror}") from exc


def upload(client: ApiClient, settings: ClientSettings, local: str,
           destination: tuple[str, str]) -> None:
    named, path = destination
    if local == "-":
        content, mode = sys.stdin.buffer.read(), 0o644
    else:
        try:
            info = os.stat(local)
            if not stat.S_ISREG(info.st_mode):
                raise PgShellError(f"{local} is not a regular file: cp copies one file "
                                   f"(a directory? pack it with tar and copy the archive)")
            content, mode = Path(local).read_bytes(), stat.S_IMODE(info.st_mode) & 0o777
        except OSError as exc:
            raise PgShellError(f"cannot read {local}: {exc.strerror}") from exc
    session = _session(client, settings, named)
    client.upload_file(session, _upload_path(client, session, path, local), content, mode)


def _upload_path(client: ApiClient, session: str, path: str, local: str) -> str:
    """As cp: a PATH that ends in / or is a directory receives the file under
    its local name. (upload_file would put the file in the directory's place,
    and everything in the directory would be gone.)"""
    if path == "" or path.endswith("/"):
        directory = path.rstrip("/")
    elif any(row["path"] == path and row["kind"] == "dir" for row in client.session_files(session)):
        directory = path
    else:
        return path
    if local == "-":
        raise PgShellError(f"{directory or 'the home'} is a directory: give the uploaded file a "
                           f"name (SESSION:{directory + '/' if directory else ''}NAME)")
    return f"{directory}/{Path(local).name}" if directory else Path(local).name


# -- changes --------------------------------------------------------------------------


def cmd_changes(args: argparse.Namespace, settings: ClientSettings) -> int:
    with api(settings) as client:
        rows = client.command_changes(args.command_id)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        slash = "/" if row["kind"] == "dir" else ""
        print(f"{_CHANGE_MARKS[row['change']]} {row['path']}{slash}")
    return 0


# -- export ---------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace, settings: ClientSettings) -> int:
    if sys.stdout.isatty():
        raise PgShellError("refusing to write a tar archive to a terminal: redirect it, "
                           "e.g. pg-shell export > files.tar")
    with api(settings) as client:
        session = session_of(args, settings, client)
        write_tar(client, session, args.at, sys.stdout.buffer)
    return 0


def write_tar(client: ApiClient, session: str, at: int | None, out: BinaryIO) -> None:
    """The tree as a tar stream (parents come before their entries)."""
    now = int(time.time())
    rows = client.session_files(session, at)
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for row in rows:
            entry = tarfile.TarInfo(row["path"])
            entry.mode, entry.mtime = row["mode"], now
            if row["kind"] == "dir":
                entry.type = tarfile.DIRTYPE
                tar.addfile(entry)
            elif row["kind"] == "symlink":
                entry.type, entry.linkname = tarfile.SYMTYPE, row["target"]
                tar.addfile(entry)
            else:
                content = _read_listed(client, session, row, at)
                entry.size = len(content)
                tar.addfile(entry, io.BytesIO(content))


def _read_listed(client: ApiClient, session: str, row: dict[str, Any], at: int | None) -> bytes:
    """A listed file's contents, as listed: without --at, a command that ends
    between the listing and the read could have changed or removed it."""
    changed = PgShellError(f"{row['path']} changed during the export (a command ended meanwhile): "
                           f"run it again, or export --at a command")
    try:
        content = client.read_file(session, row["path"], at)
    except ApiError as exc:
        if at is None and exc.code == "22023":  # no such file / not a file any more
            raise changed from exc
        raise
    if hashlib.sha256(content).hexdigest() != row["sha256"]:
        raise changed
    return content
