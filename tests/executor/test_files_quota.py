"""A command cannot store files past its tenant's files quota (0022): through
the real daemon, a command that writes 3 MiB against a 2 MiB quota fails with
the reason, keeps its output and exit status, and the session's next command
finds the files as they were before it (the host's copy, which still held the
refused files, is brought back to the session's root)."""

from __future__ import annotations

import psycopg2
import pytest

from tests.support import call


@pytest.fixture
def daemon(make_daemon):
    return make_daemon().start()


def test_a_command_writing_past_the_files_quota_fails_and_the_files_stay_as_before(
        daemon, shell, db):
    conn = psycopg2.connect(db)
    conn.autocommit = True
    try:
        conn.cursor().execute("UPDATE shell.users SET max_file_bytes = 2097152")
    finally:
        conn.close()
    kept = shell.run("echo kept > a")
    assert kept["status"] == "done", kept
    row = shell.run("head -c 3145728 /dev/urandom > big && mkdir d && cd d && echo wrote")
    assert (row["status"], row["exit_code"], row["output"]) == ("failed", 0, "wrote\n"), row
    assert row["reason"].startswith("files quota reached ("), row["reason"]
    assert row["reason"].endswith("the command's changes to its files were not kept")
    assert row["root_after"] == row["root_before"] == kept["root_after"]
    paths = [r["path"] for r in call(shell.conn, "SELECT * FROM shell_api.session_files(%s)",
                                     (shell.session_id,))]
    assert paths == ["a"]
    after = shell.run("ls; pwd")
    assert (after["status"], after["output"]) == ("done", "a\n/home/sandbox\n"), after
