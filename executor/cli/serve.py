"""`pg-shell serve`: the HTTP gateway and the web UI."""

from __future__ import annotations

import argparse

from executor.cli import Commands
from executor.config import Settings
from executor.errors import ConfigError


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
    from executor.gateway.connections import guarded_protocol

    dsn = settings.gateway_database_url or settings.require_database_url()
    refuse_privileged_login(dsn)
    app = create_app(settings, dsn)
    uvicorn.run(app, host=args.host or settings.listen_host, port=args.port or settings.listen_port,
                log_level="info", access_log=False,
                http=guarded_protocol(settings.header_timeout_s, settings.idle_timeout_s,
                                     settings.min_body_rate),
                timeout_keep_alive=max(1, round(settings.idle_timeout_s)),
                limit_concurrency=settings.max_connections,
                # X-Forwarded-For names the client only when a proxy of ours
                # set it: uvicorn's default believes any loopback client, so one
                # on the same host could claim a fresh address per login.
                proxy_headers=bool(settings.trusted_proxy_list),
                forwarded_allow_ips=settings.trusted_proxy_list)
    return 0


def refuse_privileged_login(dsn: str) -> None:
    """Row-level security does not bind a superuser or a BYPASSRLS role, so
    the gateway will not serve tenants from one."""
    from executor.db.gateway import GatewayDatabase

    db = GatewayDatabase(dsn, max_connections=1)
    try:
        problem = db.login_role_problem()
    finally:
        db.close()
    if problem:
        raise ConfigError(
            f"{problem}: row-level security would not hold. Set PG_SHELL_GATEWAY_DATABASE_URL "
            "to a connection as shell_authenticator (LOGIN NOINHERIT, as for PostgREST; give it "
            "a password with ALTER ROLE shell_authenticator PASSWORD '…').")
