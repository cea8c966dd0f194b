"""Uploads and files under audit: the real executor ran the commands and the
database applied the uploads; an attacker with superuser rights alters an
upload, a later command, a blob's bytes or a tree entry, and `pg-shell audit
verify` (with --files for what lies below the roots) reports each change."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from executor.audit.records import DATABASE_RECORD_VERSION, DATABASE_SIGNER, canonical
from tests.audit.conftest import cli, history_of, relink, verify
from tests.executor.conftest import Daemon, Shell
from tests.support import one

UPLOADED = b"uploaded bytes\n"
REPLACED = b"replaced\n"


def _upload(shell: Shell, path: str, content: bytes, mode: int) -> int:
    return one(shell.conn, "SELECT shell_api.upload_file(%s, %s, %s, %s)",
               (shell.session_id, path, content, mode))


def _commands_and_uploads(daemon: Daemon, a: Shell, b: Shell) -> dict[str, int]:
    daemon.start()
    ids = {"made": a.run("mkdir -p src && printf 'one\\n' > src/a.txt && echo b > b.txt")["id"]}
    ids["upload"] = _upload(a, "in/data.txt", UPLOADED, 0o640)
    ran = a.run("cat in/data.txt && echo more >> b.txt")
    assert ran["output"] == UPLOADED.decode(), ran
    ids["cat"] = ran["id"]
    ids["replace"] = _upload(a, "src/a.txt", REPLACED, 0o600)  # over a file, in a directory
    ran = a.run("cat src/a.txt; stat -c %a src/a.txt")
    assert ran["output"] == "replaced\n600\n", ran
    ids["last"] = ran["id"]
    ids["bob"] = b.run("echo bob")["id"]
    return ids


history = history_of(_commands_and_uploads)


def breaks(report: dict) -> list[tuple[Any, ...]]:
    return [(b["command_id"], b["cause"], b["field"], b.get("path")) for b in report["breaks"]]


def test_a_session_with_uploads_verifies_clean_with_its_files(copy, sql, history, tmp_path):
    code, report = verify(copy)
    assert (code, report["intact"], report["links"]) == (0, True, 6), report
    code, report = verify(copy, "--files")
    assert (code, report["intact"]) == (0, True), report
    # Every root's trees and both uploads' blobs (and the commands' files) were read.
    assert report["files"]["trees"] >= 5 and report["files"]["blobs"] >= 4, report
    upload = sql("SELECT * FROM shell.commands WHERE id = %s", (history.ids["upload"],))[0]
    record = json.loads(upload["result_record"])
    assert (record["v"], record["signer"], upload["signature"]) == (DATABASE_RECORD_VERSION,
                                                                   DATABASE_SIGNER, None)
    stated = {"path": "in/data.txt", "sha256": hashlib.sha256(UPLOADED).hexdigest(),
              "size": len(UPLOADED), "mode": 0o640}
    assert record["upload"] == stated == upload["upload"]
    assert record["root_after"] == upload["root_after"] != upload["root_before"]
    signed = sql("SELECT result_record FROM shell.commands WHERE id = %s", (history.ids["cat"],))
    assert json.loads(signed[0]["result_record"])["upload"] is None
    export = tmp_path / "history.jsonl"
    assert cli(copy, "audit", "export", "-o", str(export)).returncode == 0
    offline = cli(None, "audit", "verify-export", str(export))
    assert (offline.returncode, offline.stdout.strip()) == (0, "intact: 6 links in 2 sessions")


def test_a_command_tampered_after_an_upload_is_the_break_reported(copy, sql, history):
    sql("UPDATE shell.commands SET exit_code = 3 WHERE id = %s", (history.ids["last"],))
    code, report = verify(copy)
    assert (code, breaks(report)) == (1, [(history.ids["last"], "edited", "exit_code", None)])


def test_a_tampered_upload_and_a_later_tampered_command_are_both_reported(copy, sql, history):
    sql("UPDATE shell.commands SET upload = jsonb_set(upload, '{sha256}', to_jsonb(%s::text))"
        " WHERE id = %s", (hashlib.sha256(b"other").hexdigest(), history.ids["upload"]))
    sql("UPDATE shell.commands SET exit_code = 3 WHERE id = %s", (history.ids["last"],))
    code, report = verify(copy)
    assert (code, breaks(report)) == (1, [(history.ids["upload"], "edited", "upload", None),
                                          (history.ids["last"], "edited", "exit_code", None)])


def test_an_upload_moved_to_another_path_is_reported(copy, sql, history):
    sql("UPDATE shell.commands SET upload = jsonb_set(upload, '{path}', '\"in/other.txt\"')"
        " WHERE id = %s", (history.ids["upload"],))
    code, report = verify(copy)
    assert (code, breaks(report)) == (1, [(history.ids["upload"], "edited", "upload", None)])
    assert "in/other.txt" in report["breaks"][0]["detail"]


def test_a_blob_altered_in_the_database_is_found_under_the_roots(copy, sql, history):
    digest = hashlib.sha256(UPLOADED).hexdigest()
    sql("UPDATE shell.blob_chunks SET data = %s WHERE sha256 = %s", (b"UPLOADED BYTES\n", digest))
    # The chain still holds: only the files show it.
    assert verify(copy)[0] == 0
    code, report = verify(copy, "--files")
    assert (code, breaks(report)) == (1, [(history.ids["upload"], "edited", "blob", "in/data.txt")])
    assert "in/data.txt" in report["breaks"][0]["detail"]
    assert "root_after of this upload" in report["breaks"][0]["detail"]


def test_a_tree_entry_altered_in_the_database_is_found_under_the_roots(copy, sql, history):
    sql("UPDATE shell.tree_entries SET mode = 511 WHERE name = 'a.txt' AND object = %s",
        (hashlib.sha256(b"one\n").hexdigest(),))
    assert verify(copy)[0] == 0
    code, report = verify(copy, "--files")
    assert (code, breaks(report)) == (1, [(history.ids["made"], "edited", "tree", "src")])
    done = cli(copy, "audit", "verify", "--files")
    assert done.returncode == 1
    assert f"command {history.ids['made']} (chain_seq 1): edited [tree]" in done.stdout


def test_a_deleted_blob_is_found_under_the_roots(copy, sql, history):
    digest = hashlib.sha256(REPLACED).hexdigest()
    sql("DELETE FROM shell.blob_chunks WHERE sha256 = %s", (digest,))
    code, report = verify(copy, "--files")
    assert (code, breaks(report)) == (1, [(history.ids["replace"], "edited", "blob", "src/a.txt")])


def test_an_upload_rewritten_with_its_record_is_found_against_its_roots(copy, sql, history):
    # The database vouches for an upload: an attacker can rewrite its record
    # too, and re-link the chain. The file its root holds still says what
    # was put there.
    upload = sql("SELECT * FROM shell.commands WHERE id = %s", (history.ids["upload"],))[0]
    record = json.loads(upload["result_record"])
    record["upload"]["mode"] = 0o777
    sql("UPDATE shell.commands SET upload = %s::jsonb, result_record = %s WHERE id = %s",
        (json.dumps(record["upload"]), canonical(record), history.ids["upload"]))
    relink(sql, history.sessions["alice"],
           [history.ids[n] for n in ("made", "upload", "cat", "replace", "last")])
    code, report = verify(copy, "--files")
    assert code == 1
    assert (history.ids["upload"], "edited", "root_after", "in/data.txt") in breaks(report)
    assert "'in/data.txt'" in report["breaks"][-1]["detail"]
