"""`pg-shell serve`: the HTTP gateway and the web UI."""

from __future__ import annotations

import argparse
from pathlib import Path

from executor.cli import Commands
from executor.config import Settings


def register(commands: Commands) -> None:
    serve = commands.add_parser(
        "serve", help="run the HTTP gateway and web UI",
        description="Serve the shell_api functions at /rpc/<name> with PostgREST's protocol "
                    "(JWT auth, SQLSTATE → HTTP status) and the web UI from html/. Connects with "
                    "PG_SHELL_GATEWAY_DATABASE_URL (as shell_authenticator), else DATABASE_URL.")
    serve.add_argument("--host",
                       help="address to listen on (PG_SHELL_LISTEN_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (PG_SHELL_LISTEN_PORT, default 8080)")
    serve.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from executor.gateway.app import create_app

    dsn = settings.gateway_database_url or settings.require_database_url()
    app = create_app(dsn, Path(settings.html_dir), settings.metrics_interval_s)
    uvicorn.run(app, host=args.host or settings.listen_host, port=args.port or settings.listen_port,
                log_level="info", access_log=False)
    return 0
