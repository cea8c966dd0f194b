"""Which functions fix their search path (docs/development.md, Migrations):
every one that runs with its owner's rights, and every API entry point,
runs with an empty path, so no caller's path can put an object of its own
in place of one the function names. The SQL helpers they call inherit it."""

from __future__ import annotations

import psycopg2

from tests.support import call


def test_definer_functions_and_the_api_set_an_empty_search_path(db: str) -> None:
    conn = psycopg2.connect(db)
    try:
        rows = call(conn, """
            SELECT n.nspname || '.' || p.proname AS name
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname IN ('shell', 'shell_api')
              AND (p.prosecdef OR n.nspname = 'shell_api')
              AND NOT coalesce('search_path=""' = ANY (p.proconfig), false)
            ORDER BY 1""")
        checked = call(conn, """
            SELECT count(*) AS n FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname IN ('shell', 'shell_api') AND (p.prosecdef OR n.nspname = 'shell_api')
            """)[0]["n"]
    finally:
        conn.close()
    assert checked > 100
    assert [r["name"] for r in rows] == []
