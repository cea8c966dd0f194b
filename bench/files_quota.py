"""Stored files against the files quota, in the same run:

(a) ten uploads of 1 MiB of new bytes to one path: how much the database
    grew (blobs, chunks, trees, entries and the per-user counts, as
    pg_total_relation_size says), the bytes of file content stored, and what
    the quota counted for the tenant (shell.user_file_bytes) after them;
(b) an upload of one small file into a home of FILES files (DIRS
    directories): p50 of upload_file there and in an empty home, and, where
    the database can walk a tenant's history (shell.file_bytes_walked), the
    time of one such walk: what counting from scratch would cost each call.

Run it from another source tree to compare with an earlier version
(`git worktree add DIR REV`, copy this file there, run it from DIR): it
migrates its own database with that tree's migrations (dropped at the
end). Needs DATABASE_URL (a superuser). One JSON object per line on stdout.

    .venv/bin/python -m bench.files_quota
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time

import psycopg2

from bench.common import (
    Report,
    add_dsn_option,
    create_user,
    migrated_database,
    require_dsn,
    tenant_connection,
)
from executor.db.connection import connect, query

MiB = 1024 * 1024
TABLES = ("blobs", "blob_chunks", "trees", "tree_entries", "file_usage", "held_trees",
          "held_blobs")


def stored_bytes(su: psycopg2.extensions.connection) -> int:
    """What the workspace's tables take, those the schema has."""
    rows = query(su, "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint AS n "
                     "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                     "WHERE n.nspname = 'shell' AND c.relname = ANY (%s)", (list(TABLES),))
    return int(rows[0]["n"])


def one(conn: psycopg2.extensions.connection, sql: str, params: tuple[object, ...]) -> object:
    return next(iter(query(conn, sql, params)[0].values()))


def repeated_uploads(report: Report, dsn: str, su: psycopg2.extensions.connection) -> None:
    uid = create_user(dsn, "again", "bench password")
    tenant = tenant_connection(dsn, uid)
    session = one(tenant, "SELECT shell_api.create_session('again')", ())
    query(su, "CHECKPOINT")
    before, content_before = stored_bytes(su), int(one(
        su, "SELECT coalesce(sum(size), 0)::bigint FROM shell.blobs", ()))
    for _ in range(10):
        one(tenant, "SELECT shell_api.upload_file(%s, 'same.bin', %s)", (session, os.urandom(MiB)))
    query(su, "CHECKPOINT")
    grown = stored_bytes(su) - before
    content = int(one(su, "SELECT coalesce(sum(size), 0)::bigint FROM shell.blobs", ())) \
        - content_before
    counted = int(one(su, "SELECT shell.user_file_bytes(%s)", (uid,)))
    report.emit_figure("ten_1mib_uploads_database_growth", grown, "bytes",
                       per_upload=grown // 10)
    report.emit_figure("ten_1mib_uploads_content_stored", content, "bytes")
    report.emit_figure("ten_1mib_uploads_quota_counted", counted, "bytes",
                       counted_of_content=round(counted / content, 3))
    tenant.close()


def big_home(su: psycopg2.extensions.connection, files: int, dirs: int) -> str:
    """A root of ``dirs`` directories of files//dirs small files, as an
    executor stores one; its hash."""
    content = b"x"
    digest = hashlib.sha256(content).hexdigest()
    query(su, "SELECT shell.put_blob_chunk(%s, 1, 1, 0, %s)", (digest, content))
    entries = []
    for d in range(dirs):
        inner = [{"name": f"file-{d}-{i:05d}.txt", "kind": "file", "mode": 420, "size": 1,
                  "object": digest, "target": None} for i in range(files // dirs)]
        tree = one(su, "SELECT (shell.put_trees(%s::jsonb))[1]", (json.dumps([inner]),))
        entries.append({"name": f"dir{d:03d}", "kind": "dir", "mode": 493, "size": len(inner),
                        "object": tree, "target": None})
    return str(one(su, "SELECT (shell.put_trees(%s::jsonb))[1]", (json.dumps([entries]),)))


def upload_p50(dsn: str, su: psycopg2.extensions.connection, name: str, root: str | None,
               runs: int) -> tuple[float, str]:
    uid = create_user(dsn, name, "bench password")
    tenant = tenant_connection(dsn, uid)
    session = one(tenant, "SELECT shell_api.create_session(%s)", (name,))
    if root is not None:
        query(su, "UPDATE shell.sessions SET root = %s WHERE id = %s", (root, session))
    times = []
    for i in range(runs):
        started = time.perf_counter()
        one(tenant, "SELECT shell_api.upload_file(%s, %s, %s)",
            (session, f"dir007/new-{i}.txt", os.urandom(64)))
        times.append((time.perf_counter() - started) * 1000)
    tenant.close()
    return statistics.median(times), uid


def uploads_in_a_big_home(report: Report, dsn: str, su: psycopg2.extensions.connection,
                          files: int, dirs: int, runs: int) -> None:
    root = big_home(su, files, dirs)
    empty, _ = upload_p50(dsn, su, "empty", None, runs)
    big, uid = upload_p50(dsn, su, "big", root, runs)
    report.emit_figure("upload_p50_empty_home", round(empty, 2), "ms")
    report.emit_figure("upload_p50_big_home", round(big, 2), "ms", files=files, dirs=dirs,
                       ratio=round(big / empty, 2))
    if query(su, "SELECT to_regproc('shell.file_bytes_walked') IS NOT NULL AS x")[0]["x"]:
        started = time.perf_counter()
        walked = int(one(su, "SELECT shell.file_bytes_walked(%s)", (uid,)))
        report.emit_figure("walk_of_the_history_ms", round((time.perf_counter() - started) * 1000,
                                                           2), "ms", files=files,
                           counted_equals_walk=walked == int(one(
                               su, "SELECT shell.user_file_bytes(%s)", (uid,))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dsn_option(parser)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--dirs", type=int, default=100)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    admin_dsn = require_dsn(parser, args)
    report = Report("files_quota")
    with migrated_database(admin_dsn, "bench_files", report.log) as dsn:
        su = connect(dsn)
        su.autocommit = True
        try:
            repeated_uploads(report, dsn, su)
            uploads_in_a_big_home(report, dsn, su, args.files, args.dirs, args.runs)
        finally:
            su.close()


if __name__ == "__main__":
    main()
