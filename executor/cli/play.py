"""`pg-shell play`: a command's output played back with its original timing."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

from executor.cli import Commands
from executor.cli.client import add_command, api
from executor.client_settings import ClientSettings
from executor.errors import PgShellError


def register(commands: Commands) -> None:
    play = add_command(commands, "play", "play a command's output back with its original timing",
                       "Print COMMAND_ID's output chunk by chunk, waiting between chunks as long "
                       "as they were apart when the command ran (divided by --speed; --speed 0 "
                       "prints everything at once).",
                       "  pg-shell play 42\n  pg-shell play 42 --speed 4\n"
                       "  pg-shell play 42 --speed 0")
    play.add_argument("command_id", type=int, metavar="COMMAND_ID", help="the command's id")
    play.add_argument("--speed", type=float, default=1.0, metavar="X",
                      help="playback speed (default 1: as it happened; 0: no delays)")
    play.set_defaults(handler=cmd_play)


def cmd_play(args: argparse.Namespace, settings: ClientSettings) -> int:
    if not args.speed >= 0:
        raise PgShellError("--speed must be 0 or more")
    with api(settings) as client:
        chunks = client.output_timeline(args.command_id)
    try:
        play(chunks, args.speed, sys.stdout)
    except KeyboardInterrupt:
        return 130
    return 0


def play(chunks: list[dict[str, Any]], speed: float, out: TextIO) -> None:
    """Writes each chunk at its offset_ms (scaled by 1/speed) from now."""
    start = time.monotonic()
    for chunk in chunks:
        if speed > 0:
            delay = start + chunk["offset_ms"] / 1000 / speed - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        out.write(chunk["data"])
        out.flush()
