"""Which server a connection reached, and the replicas it streams to: what
`pg-shell db status` says first, so that behind a multi-host DSN an
operator sees which node is the primary now."""

from __future__ import annotations

from dataclasses import dataclass

from executor.db.database import Connector


@dataclass(frozen=True)
class Replica:
    name: str  # its application_name (Patroni: the member's name), else its address
    state: str  # streaming, catchup, ...
    sync_state: str  # sync, async, potential, quorum
    behind_bytes: int | None  # WAL not yet replayed there


@dataclass(frozen=True)
class Server:
    address: str  # host:port as the server sees its end (a socket: "local:PORT")
    primary: bool
    version: str
    database: str
    replicas: list[Replica]


def describe(db: Connector) -> Server:
    [row] = db.call(
        "SELECT host(inet_server_addr()) AS host, inet_server_port() AS port,"
        " NOT pg_is_in_recovery() AS primary,"
        " split_part(current_setting('server_version'), ' ', 1) AS version,"
        " current_database() AS database")
    replicas = db.call(
        "SELECT coalesce(nullif(application_name, ''), host(client_addr), 'local') AS name,"
        " state, sync_state,"
        " pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint AS behind"
        " FROM pg_stat_replication ORDER BY 1") if row["primary"] else []
    address = f"{row['host']}:{row['port']}" if row["host"] else f"local:{row['port'] or ''}"
    return Server(address, bool(row["primary"]), row["version"], row["database"],
                  [Replica(r["name"], r["state"] or "unknown", r["sync_state"] or "unknown",
                           r["behind"]) for r in replicas])
