"""Tamper-evident history, end to end: the real executor produced the
history (signed records, one chain per session); an attacker with superuser
rights edits, deletes, reorders, forges or strips it, and `pg-shell audit
verify` names the first broken link and why."""

from __future__ import annotations

import json

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from executor.audit.records import DATABASE_SIGNER
from executor.audit.signing import Signer
from tests.audit.conftest import cli, verify


def first_break(report: dict) -> dict:
    assert not report["intact"], report
    assert len(report["breaks"]) == 1, report
    return report["breaks"][0]


def row(sql, command_id: int) -> dict:
    return sql("SELECT * FROM shell.commands WHERE id = %s", (command_id,))[0]


def test_intact_history_verifies_with_signed_executor_results_and_unsigned_database_ones(copy, sql,
                                                                                         history):
    code, report = verify(copy)
    assert (code, report["intact"], report["sessions"], report["links"]) == (0, True, 2, 7)
    alice = sql("SELECT id, status, chain_seq, key_id, signature, result_record"
                " FROM shell.commands WHERE session_id = %s ORDER BY chain_seq",
                (history.sessions["alice"],))
    assert [r["chain_seq"] for r in alice] == [1, 2, 3, 4, 5, 6]
    assert alice[0]["id"] == history.ids["cancelled"]
    assert json.loads(alice[0]["result_record"])["signer"] == DATABASE_SIGNER
    assert alice[0]["signature"] is None
    key_id = Signer.from_file(history.key_file).key_id
    assert {r["key_id"] for r in alice[1:]} == {key_id}
    record = alice[1]["result_record"]
    # Canonical: sorted keys, compact separators, exactly as the executor signed it.
    assert record == json.dumps(json.loads(record), sort_keys=True, separators=(",", ":"))
    lane = sql("SELECT chain_seq, chain_head FROM shell.lanes WHERE session_id = %s",
               (history.sessions["alice"],))[0]
    assert (lane["chain_seq"], lane["chain_head"]) == (6, sql(
        "SELECT chain_hash FROM shell.commands WHERE id = %s",
        (history.ids["last"],))[0]["chain_hash"])
    code, report = verify(copy, "--session", history.sessions["bob"])
    assert (code, report["sessions"], report["links"]) == (0, 1, 1)


def test_an_edited_output_is_named(copy, sql, history):
    sql("UPDATE shell.commands SET output = 'goodbye\n' WHERE id = %s", (history.ids["hello"],))
    code, report = verify(copy)
    found = first_break(report)
    assert (code, found["command_id"], found["cause"], found["field"]) == (1, history.ids["hello"],
                                                                           "edited", "output")


def test_an_edited_exit_code_is_named(copy, sql, history):
    sql("UPDATE shell.commands SET exit_code = 0 WHERE id = %s", (history.ids["false"],))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["cause"], found["field"]) == (history.ids["false"], "edited",
                                                                     "exit_code")


def test_edited_output_chunks_are_named(copy, sql, history):
    # The chunks are the one stored copy of the output.
    sql("ALTER TABLE shell.output_chunks DISABLE TRIGGER USER")
    sql("UPDATE shell.output_chunks SET data = 'x' WHERE command_id = %s", (history.ids["last"],))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["cause"], found["field"]) == (history.ids["last"], "edited",
                                                                     "output")


def test_a_deleted_row_breaks_the_chain_at_the_next_link(copy, sql, history):
    gone = history.ids["state"]
    sql("DELETE FROM shell.output_chunks WHERE command_id = %s", (gone,))
    sql("DELETE FROM shell.commands WHERE id = %s", (gone,))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["chain_seq"], found["cause"]) == (history.ids["false"], 4,
                                                                         "deleted")
    assert "chain_seq 3 missing" in found["detail"]


def test_a_deleted_row_is_found_even_when_the_rest_is_renumbered(copy, sql, history):
    gone = history.ids["state"]
    sql("DELETE FROM shell.output_chunks WHERE command_id = %s", (gone,))
    sql("DELETE FROM shell.commands WHERE id = %s", (gone,))
    sql("UPDATE shell.commands SET chain_seq = -chain_seq WHERE session_id = %s AND chain_seq > 3",
        (history.sessions["alice"],))
    sql("UPDATE shell.commands SET chain_seq = -chain_seq - 1"
        " WHERE session_id = %s AND chain_seq < 0", (history.sessions["alice"],))
    sql("UPDATE shell.lanes SET chain_seq = 5 WHERE session_id = %s", (history.sessions["alice"],))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["chain_seq"], found["cause"]) == (history.ids["false"], 3,
                                                                         "deleted")


def test_a_deleted_last_row_is_found_from_the_chain_head(copy, sql, history):
    gone = history.ids["last"]
    sql("DELETE FROM shell.output_chunks WHERE command_id = %s", (gone,))
    sql("DELETE FROM shell.commands WHERE id = %s", (gone,))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["chain_seq"], found["cause"]) == (None, 6, "deleted")


def test_swapped_chain_positions_are_reported_as_reordered(copy, sql, history):
    a, b = history.ids["state"], history.ids["false"]  # chain_seq 3 and 4
    sql("UPDATE shell.commands SET chain_seq = -1 WHERE id = %s", (a,))
    sql("UPDATE shell.commands SET chain_seq = 3 WHERE id = %s", (b,))
    sql("UPDATE shell.commands SET chain_seq = 4 WHERE id = %s", (a,))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["chain_seq"], found["cause"]) == (b, 3, "reordered")


def test_swapped_links_with_all_their_chain_fields_are_reported_as_reordered(copy, sql, history):
    a, b = row(sql, history.ids["state"]), row(sql, history.ids["false"])
    sql("UPDATE shell.commands SET chain_seq = -1 WHERE id = %s", (a["id"],))
    for target, source in ((b, a), (a, b)):
        sql("UPDATE shell.commands SET chain_seq = %s, chain_prev = %s, chain_hash = %s"
            " WHERE id = %s",
            (source["chain_seq"], source["chain_prev"], source["chain_hash"], target["id"]))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["chain_seq"], found["cause"]) == (b["id"], 3, "reordered")


def _altered(record_text: str, **changes) -> str:
    record = json.loads(record_text)
    record.update(changes)
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def test_a_result_signed_with_another_key_is_forged(copy, sql, history):
    target = row(sql, history.ids["false"])
    intruder = Signer(Ed25519PrivateKey.generate())
    forged = _altered(target["result_record"], exit_code=0, signer=intruder.key_id)
    sql("UPDATE shell.commands SET exit_code = 0, result_record = %s, signature = %s, "
        "key_id = %s WHERE id = %s",
        (forged, intruder.sign(forged), intruder.key_id, target["id"]))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["cause"]) == (target["id"], "forged")
    assert "unknown key" in found["detail"]


def test_an_altered_record_under_its_old_signature_is_forged(copy, sql, history):
    target = row(sql, history.ids["false"])
    sql("UPDATE shell.commands SET exit_code = 0, result_record = %s WHERE id = %s",
        (_altered(target["result_record"], exit_code=0), target["id"]))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["cause"]) == (target["id"], "forged")
    assert "does not match" in found["detail"]


def test_a_signature_made_by_another_key_in_the_registered_keys_name_is_forged(copy, sql, history):
    target = row(sql, history.ids["hello"])
    intruder = Signer(Ed25519PrivateKey.generate())
    sql("UPDATE shell.commands SET signature = %s WHERE id = %s",
        (intruder.sign(target["result_record"]), target["id"]))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["cause"]) == (target["id"], "forged")


def test_a_stripped_signature_is_missing(copy, sql, history):
    sql("UPDATE shell.commands SET signature = NULL, key_id = NULL WHERE id = %s",
        (history.ids["hello"],))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["cause"]) == (history.ids["hello"], "missing signature")


def test_a_done_result_passed_off_as_a_database_record_is_missing_its_signature(copy, sql, history):
    target = row(sql, history.ids["hello"])
    sql("UPDATE shell.commands SET result_record = %s, signature = NULL, key_id = NULL"
        " WHERE id = %s",
        (_altered(target["result_record"], signer=DATABASE_SIGNER), target["id"]))
    found = first_break(verify(copy)[1])
    assert (found["command_id"], found["cause"]) == (target["id"], "missing signature")


def test_only_the_trusted_keys_count_when_given(copy, history):
    trusted = Signer.from_file(history.key_file).public_key_hex
    assert verify(copy, "--trust", trusted)[0] == 0
    other = Signer(Ed25519PrivateKey.generate()).public_key_hex
    found = first_break(verify(copy, "--session", history.sessions["bob"], "--trust", other)[1])
    assert (found["command_id"], found["cause"]) == (history.ids["bob"], "forged")


def test_an_export_verifies_offline_and_fails_offline_when_tampered(copy, history, tmp_path):
    export = tmp_path / "history.jsonl"
    done = cli(copy, "audit", "export", "-o", str(export))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    assert [line["type"] for line in lines].count("link") == 7
    assert [line["type"] for line in lines].count("key") == 1
    offline = cli(None, "audit", "verify-export", str(export))
    assert (offline.returncode, offline.stdout.strip()) == (
        0, "intact: 7 links in 2 sessions"), offline.stderr

    for line in lines:
        if line["type"] == "link" and line["command_id"] == history.ids["hello"]:
            line["output"] = "goodbye\n"
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(json.dumps(line) + "\n" for line in lines))
    offline = cli(None, "audit", "verify-export", "--json", str(tampered))
    found = first_break(json.loads(offline.stdout))
    assert (offline.returncode, found["command_id"], found["cause"], found["field"]) == (
        1, history.ids["hello"], "edited", "output")


def test_verify_prints_a_readable_report(copy, sql, history):
    sql("UPDATE shell.commands SET exit_code = 0 WHERE id = %s", (history.ids["false"],))
    done = cli(copy, "audit", "verify")
    assert done.returncode == 1
    assert f"command {history.ids['false']} (chain_seq 4): edited [exit_code]" in done.stdout


def test_every_break_of_a_session_is_reported_not_only_the_first(copy, sql, history):
    ids = history.ids
    sql("UPDATE shell.commands SET output = 'goodbye\n' WHERE id = %s", (ids["hello"],))
    sql("DELETE FROM shell.output_chunks WHERE command_id = %s", (ids["state"],))
    sql("DELETE FROM shell.commands WHERE id = %s", (ids["state"],))
    sql("UPDATE shell.commands SET exit_code = 0 WHERE id = %s", (ids["false"],))
    sql("UPDATE shell.commands SET exit_code = 7 WHERE id = %s", (ids["last"],))
    code, report = verify(copy)
    found = [(b["command_id"], b["chain_seq"], b["cause"], b["field"]) for b in report["breaks"]]
    assert (code, found) == (1, [(ids["hello"], 2, "edited", "output"),
                                 (ids["false"], 4, "deleted", None),
                                 (ids["false"], 4, "edited", "exit_code"),
                                 (ids["last"], 6, "edited", "exit_code")])
    done = cli(copy, "audit", "verify")
    assert "BROKEN: 4 breaks in 1 of 2 sessions" in done.stdout


def test_two_deletions_apart_are_two_breaks(copy, sql, history):
    ids = history.ids
    for gone in (ids["state"], ids["nul"]):  # chain_seq 3 and 5
        sql("DELETE FROM shell.output_chunks WHERE command_id = %s", (gone,))
        sql("DELETE FROM shell.commands WHERE id = %s", (gone,))
    code, report = verify(copy)
    found = [(b["command_id"], b["chain_seq"], b["cause"]) for b in report["breaks"]]
    assert (code, found) == (1, [(ids["false"], 4, "deleted"), (ids["last"], 6, "deleted")])
