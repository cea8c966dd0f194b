"""Tenants' files through a running gateway, for bench.gateway_abuse: its
peak resident memory (VmHWM, reset through /proc/<pid>/clear_refs before
each round) while N uploads of 64 MiB and N downloads of 32 MiB run at
once, and how much the database grows per repeated upload of one path.

Uploads go as clients send them (upload_file, the content in bytea's hex
format inside JSON, streamed from here so the client holds no file either);
downloads ask for application/octet-stream and are hashed as they arrive."""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator

import httpx

from bench.common import Report, create_user, peak_during, tenant_connection
from executor.db.connection import connect, query
from tests.support import one

MiB = 1024 * 1024
UPLOAD_BYTES = 64 * MiB
DOWNLOAD_BYTES = 32 * MiB
USERS = 8  # the parallel calls are spread over them (each user's own caps stay out of it)
PASSWORD = "bench-load-password"
GROWTH_UPLOADS = 10
GROWTH_BYTES = MiB
# The workspace's tables and an upload's staging: what stored files cost the database.
STORED = ("shell.blobs", "shell.blob_chunks", "shell.trees", "shell.tree_entries",
          "shell.commands")


def content(size: int, seed: str) -> Iterator[bytes]:
    """``size`` bytes that do not compress (as most uploaded files), a MiB at a time."""
    for start in range(0, size, MiB):
        yield random.Random(f"{seed} {start}").randbytes(min(MiB, size - start))


def upload_body(session: str, path: str, size: int, seed: str) -> Iterator[bytes]:
    yield json.dumps({"p_session_id": session, "p_path": path})[:-1].encode()
    yield b', "p_content": "\\\\x'
    for piece in content(size, seed):
        yield piece.hex().encode()
    yield b'"}'


class Tenants:
    """USERS users with a token and one session per parallel call."""

    def __init__(self, url: str, dsn: str) -> None:
        self.url = url
        self.users: list[tuple[str, str]] = []  # user id, token
        with httpx.Client(base_url=url, timeout=60) as http:
            for n in range(USERS):
                name = f"load_{n}"
                user_id = create_user(dsn, name, PASSWORD, sessions=64)
                answer = http.post("/rpc/login", json={"p_username": name, "p_password": PASSWORD})
                answer.raise_for_status()
                self.users.append((user_id, str(answer.json()["token"])))

    def token(self, n: int) -> str:
        return self.users[n % USERS][1]

    def session(self, n: int) -> str:
        with httpx.Client(base_url=self.url, timeout=60) as http:
            answer = http.post("/rpc/create_session", json={"p_name": f"load {n}"},
                               headers=self.auth(n))
            answer.raise_for_status()
            return str(answer.json())

    def auth(self, n: int) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(n)}"}


def in_parallel(count: int, one_call: Callable[[int], int]) -> Counter[int]:
    """``one_call(i)`` for i < count at once; the statuses they answered (0:
    the connection failed, -1: the bytes were not the file's)."""
    statuses: Counter[int] = Counter()
    lock = threading.Lock()

    def run(i: int) -> None:
        try:
            status = one_call(i)
        except httpx.HTTPError:
            status = 0
        with lock:
            statuses[status] += 1
    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def uploads(report: Report, pid: int, tenants: Tenants, parallel: int, code: str) -> None:
    sessions = [tenants.session(i) for i in range(parallel)]

    def upload(i: int) -> int:
        with httpx.Client(base_url=tenants.url, timeout=600) as http:
            return http.post("/rpc/upload_file",
                             content=upload_body(sessions[i], "big.bin", UPLOAD_BYTES,
                                                 f"{code} {parallel} {i}"),
                             headers={**tenants.auth(i), "Content-Type": "application/json"}
                             ).status_code
    statuses: Counter[int] = Counter()
    peak, before, took = peak_during(pid, lambda: statuses.update(in_parallel(parallel, upload)))
    report.emit_figure(f"peak_rss_{parallel}_parallel_64mib_uploads", peak / 1e6, "MB",
                       rss_before_mb=round(before / 1e6, 1), seconds=round(took, 1),
                       statuses=dict(statuses), code=code)


def downloads(report: Report, pid: int, tenants: Tenants, dsn: str, parallel: int,
              code: str) -> None:
    sessions = [tenants.session(1000 + i) for i in range(parallel)]
    for i, session in enumerate(sessions):
        conn = tenant_connection(dsn, tenants.users[i % USERS][0])
        try:
            one(conn, "SELECT shell_api.upload_file(%s, 'f.bin', %s)",
                (session, b"".join(content(DOWNLOAD_BYTES, f"{code} down {i}"))))
        finally:
            conn.close()

    def download(i: int) -> int:
        digest = hashlib.sha256()
        with httpx.Client(base_url=tenants.url, timeout=600) as http, \
                http.stream("POST", "/rpc/read_file",
                            json={"p_session_id": sessions[i], "p_path": "f.bin"},
                            headers={**tenants.auth(i), "Accept": "application/octet-stream"}
                            ) as answer:
            for piece in answer.iter_bytes():
                digest.update(piece)
        expected = hashlib.sha256(b"".join(content(DOWNLOAD_BYTES, f"{code} down {i}")))
        return answer.status_code if digest.digest() == expected.digest() else -1
    statuses: Counter[int] = Counter()
    peak, before, took = peak_during(pid, lambda: statuses.update(in_parallel(parallel, download)))
    report.emit_figure(f"peak_rss_{parallel}_parallel_32mib_downloads", peak / 1e6, "MB",
                       rss_before_mb=round(before / 1e6, 1), seconds=round(took, 1),
                       statuses=dict(statuses), code=code)


def stored_bytes(dsn: str, vacuum: bool = False) -> int:
    """What the stored files take in the database (tables, indexes, TOAST);
    with ``vacuum``, after VACUUM of the tables (what autovacuum leaves: an
    upload's staged parts are deleted rows until then)."""
    admin = connect(dsn)
    try:
        tables = [t for t in (*STORED, "shell.upload_parts")
                  if query(admin, "SELECT to_regclass(%s) IS NOT NULL AS present",
                           (t,))[0]["present"]]
        if vacuum:
            admin.autocommit = True
            with admin.cursor() as cur:
                cur.execute("VACUUM " + ", ".join(tables))
        return int(query(admin, "SELECT " + " + ".join(
            f"pg_total_relation_size('{t}')" for t in tables) + " AS size")[0]["size"])
    finally:
        admin.close()


def growth(report: Report, tenants: Tenants, dsn: str, code: str) -> None:
    """The database's growth per upload of GROWTH_BYTES to one path, new
    content each time, and the same content each time."""
    session = tenants.session(2000)
    with httpx.Client(base_url=tenants.url, timeout=600) as http:
        for kind in ("new_content", "same_content"):
            before = stored_bytes(dsn, vacuum=True)
            statuses: Counter[int] = Counter()
            for i in range(GROWTH_UPLOADS):
                seed = f"{code} growth {i}" if kind == "new_content" else f"{code} same"
                statuses[http.post("/rpc/upload_file",
                                   content=upload_body(session, "again.bin", GROWTH_BYTES, seed),
                                   headers={**tenants.auth(2000),
                                            "Content-Type": "application/json"}).status_code] += 1
            grown = stored_bytes(dsn) - before
            vacuumed = stored_bytes(dsn, vacuum=True) - before
            report.emit_figure(f"db_growth_per_1mib_upload_{kind}",
                               grown / GROWTH_UPLOADS / MiB, "MiB", uploads=GROWTH_UPLOADS,
                               after_vacuum_mib=round(vacuumed / GROWTH_UPLOADS / MiB, 4),
                               statuses=dict(statuses), code=code)


def run(report: Report, pid: int, url: str, dsn: str, code: str, parallel: list[int]) -> None:
    tenants = Tenants(url, dsn)
    for count in parallel:
        report.log(f"{code}: {count} uploads of 64 MiB at once")
        uploads(report, pid, tenants, count, code)
        report.log(f"{code}: {count} downloads of 32 MiB at once")
        downloads(report, pid, tenants, dsn, count, code)
    report.log(f"{code}: {GROWTH_UPLOADS} uploads to one path")
    growth(report, tenants, dsn, code)
