"""The gateway's database side: a pool of connections as the authenticator,
the shell_api catalog, and calls made the way PostgREST makes them
(one transaction: SET LOCAL ROLE, request.jwt.claims, the function)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg2
import psycopg2.extras
import psycopg2.pool
import psycopg2.sql

from executor.db import row_query
from executor.db.connection import READ_ONLY_SQLSTATE, translate, translated_errors
from executor.errors import DatabaseError

log = logging.getLogger(__name__)
T = TypeVar("T")
API_SCHEMA = "shell_api"
HTML_TYPE = 'shell_api."text/html"'
# The settings of the roles a request may become (ALTER ROLE … SET, e.g.
# statement_timeout), applied per transaction as PostgREST applies them:
# SET ROLE alone does not bring a role's settings along.
_ROLE_SETTINGS = """
SELECT r.rolname AS role, s.setconfig AS settings
FROM pg_db_role_setting s
JOIN pg_roles r ON r.oid = s.setrole
WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
  AND r.rolname IN ('shell_anon', 'shell_user')
ORDER BY s.setdatabase
"""

_CATALOG = """
SELECT p.proname AS name,
       p.provolatile IN ('s', 'i') AS read_only,
       p.proretset AS returns_set,
       format_type(p.prorettype, NULL) AS return_type,
       format_type(coalesce(nullif(rt.typbasetype, 0), p.prorettype), NULL) AS return_base_type,
       p.pronargdefaults AS defaults,
       coalesce((SELECT array_agg(a.name ORDER BY a.ord)
                 FROM unnest(p.proargnames,
                             coalesce(p.proargmodes, array_fill('i'::"char", ARRAY[p.pronargs])))
                      WITH ORDINALITY AS a(name, mode, ord)
                 WHERE a.mode IN ('i', 'b', 'v')), '{}') AS arg_names,
       array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t) AS arg_types
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_type rt ON rt.oid = p.prorettype
WHERE n.nspname = %s
"""


@dataclass(frozen=True)
class RpcFunction:
    name: str
    read_only: bool
    returns_set: bool
    return_type: str
    return_base_type: str  # the type a domain is over, else return_type
    arg_names: tuple[str, ...]
    arg_types: tuple[str, ...]
    defaults: int

    @property
    def required(self) -> tuple[str, ...]:
        return self.arg_names[: len(self.arg_names) - self.defaults]

    @property
    def returns_html(self) -> bool:
        return self.return_type == HTML_TYPE

    @property
    def returns_bytes(self) -> bool:
        """A scalar bytea (or a domain over it, as PostgREST's media type
        handlers declare one): served raw when application/octet-stream is asked for."""
        return self.return_base_type == "bytea" and not self.returns_set


@dataclass
class ResponseSettings:
    """What a function asked for through PostgREST's response.status and
    response.headers settings (a status, and headers as name → value)."""
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


class GatewayDatabase:
    def __init__(self, dsn: str, max_connections: int = 16) -> None:
        with translated_errors():
            self._pool = psycopg2.pool.ThreadedConnectionPool(1, max_connections, dsn,
                                                              application_name="pg-shell-gateway")
        # The pool raises when empty; requests wait for a connection instead.
        self._slots = threading.BoundedSemaphore(max_connections)
        self.role_settings: dict[str, list[tuple[str, str]]] = {}

    def close(self) -> None:
        self._pool.closeall()

    def call(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        """Runs one statement as the login role (a Connector, as db/database.py says)."""
        def run(cur: Any) -> list[dict[str, Any]]:
            cur.execute(sql, params)
            return [dict(r) for r in cur.fetchall()] if cur.description else []
        return self.transact(run)

    def transact(self, work: Callable[[Any], T]) -> T:
        """Runs ``work`` on a cursor of a pooled connection, in one transaction."""
        with self._slots:
            try:
                conn = self._pool.getconn()
            except psycopg2.Error as exc:
                raise translate(exc) from exc
            broken = False
            try:
                with conn, conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                    return work(cur)
            except psycopg2.Error as exc:
                broken = (conn.closed != 0 or isinstance(exc, psycopg2.OperationalError)
                          or exc.pgcode == READ_ONLY_SQLSTATE)
                raise translate(exc) from exc
            finally:
                self._pool.putconn(conn, close=broken)

    def catalog(self) -> dict[str, RpcFunction]:
        def read(cur: Any) -> dict[str, RpcFunction]:
            cur.execute(_CATALOG, (API_SCHEMA,))
            return {
                r["name"]: RpcFunction(r["name"], r["read_only"], r["returns_set"],
                                       r["return_type"], r["return_base_type"],
                                       tuple(r["arg_names"]), tuple(r["arg_types"]), r["defaults"])
                for r in cur.fetchall()
            }
        return self.transact(read)

    def result_columns(self) -> dict[str, tuple[str, ...]]:
        """Each set-returning function's result columns, in order."""
        def read(cur: Any) -> dict[str, tuple[str, ...]]:
            cur.execute(row_query.RESULT_COLUMNS, {"schema": API_SCHEMA})
            columns: dict[str, list[str]] = {}
            for r in cur.fetchall():
                columns.setdefault(r["function"], []).append(r["column"])
            return {name: tuple(cols) for name, cols in columns.items()}
        return self.transact(read)

    def read_rows(self, query: row_query.RowQuery, role: str, claims: dict[str, Any] | None,
                  check: Callable[[row_query.RowPage], None],
                  encode: Callable[[Any], bytes] | None = None,
                  budget: int | None = None, max_rows: int | None = None) -> row_query.RowPage:
        """One page of a set-returning function's rows, read as ``role``
        (encoded, within ``budget`` bytes, at most ``max_rows``: row_query.read_page); ``check`` may
        refuse the page, and then the call is rolled back."""
        def read(cur: Any) -> row_query.RowPage:
            _become(cur, role, claims, self.role_settings.get(role, []), query.call.arguments)
            page = row_query.read_page(cur, query, encode, budget, max_rows)
            check(page)
            return page
        return self.transact(read)

    def load_role_settings(self) -> None:
        def read(cur: Any) -> dict[str, list[tuple[str, str]]]:
            cur.execute(_ROLE_SETTINGS)
            found: dict[str, list[tuple[str, str]]] = {}
            for r in cur.fetchall():  # a database's settings come after (and win over) global ones
                for item in r["settings"]:
                    name, _, value = item.partition("=")
                    found.setdefault(r["role"], []).append((name, value))
            return found
        self.role_settings = self.transact(read)

    def login_role_problem(self) -> str | None:
        """Why the login role may not serve tenants (it would see past
        row-level security), or None."""
        def read(cur: Any) -> str | None:
            cur.execute("SELECT rolname, rolsuper, rolbypassrls FROM pg_roles"
                        " WHERE rolname = session_user")
            r = cur.fetchone()
            kind = "a superuser" if r["rolsuper"] else "BYPASSRLS" if r["rolbypassrls"] else None
            return f"the gateway's login role {r['rolname']} is {kind}" if kind else None
        return self.transact(read)

    def call_function(self, fn: RpcFunction, args: dict[str, Any], role: str,
             claims: dict[str, Any] | None, response: ResponseSettings | None = None) -> Any:
        """Calls ``fn`` with named arguments (already checked against the
        catalog) as ``role``; returns a list of rows for a set-returning
        function, else the scalar. ``response`` receives the status and
        headers the function set, if any."""
        call = row_query.function_source(API_SCHEMA, fn.name, args,
                                         dict(zip(fn.arg_names, fn.arg_types)))
        template = "SELECT * FROM {}" if fn.returns_set else "SELECT {} AS result"
        sql = psycopg2.sql.SQL(template).format(call.source)

        def invoke(cur: Any) -> Any:
            _become(cur, role, claims, self.role_settings.get(role, []), call.arguments)
            cur.execute(sql, call.params or None)
            rows = cur.fetchall()
            if response is not None:
                found = _response_settings(cur)
                response.status, response.headers = found.status, found.headers
            if fn.returns_set:
                return [dict(r) for r in rows]
            result = rows[0]["result"]
            return bytes(result) if isinstance(result, memoryview) else result  # bytea
        return self.transact(invoke)


def _become(cur: Any, role: str, claims: dict[str, Any] | None,
            settings: list[tuple[str, str]], arguments: str) -> None:
    """The rest of the transaction runs as the caller, with the caller's role
    settings (statement_timeout: a request may not hold the database for
    long), as PostgREST runs it, and the call's ``arguments`` at hand
    (row_query.ARGUMENTS_SETTING; this statement does not fail on them)."""
    calls = ["set_config('role', %s, true)", "set_config('request.jwt.claims', %s, true)",
             f"set_config('{row_query.ARGUMENTS_SETTING}', %s, true)"]
    values = [role, json.dumps(claims) if claims is not None else "", arguments]
    for name, value in settings:  # one statement: a round trip fewer per setting
        calls.append("set_config(%s, %s, true)")
        values += [name, value]
    cur.execute("SELECT " + ", ".join(calls), values)


def _response_settings(cur: Any) -> ResponseSettings:
    """response.status / response.headers as the function left them; PostgREST
    refuses malformed ones, and so does the gateway (a DatabaseError, 500)."""
    cur.execute("SELECT current_setting('response.status', true) AS status,"
                " current_setting('response.headers', true) AS headers")
    row = cur.fetchone()
    answer = ResponseSettings()
    try:
        if row["status"]:
            answer.status = int(row["status"])
        for header in json.loads(row["headers"] or "[]"):
            answer.headers.update({str(k): str(v) for k, v in dict(header).items()})
    except (TypeError, ValueError) as exc:
        raise DatabaseError(f"response.status or response.headers is malformed: {exc}") from exc
    return answer
