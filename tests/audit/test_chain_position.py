"""Records bind their chain position (version 3): an attacker with superuser
rights who deletes or reorders signed links and then re-links everything
(renumbers chain_seq, recomputes every chain_prev, chain_hash and the
session's head, so every hash checks out) is still caught with --trust,
because each signed record names its own chain_seq and chain_prev. A chain
cut short at its end is caught against a head exported before."""

from __future__ import annotations

import json

from executor.audit.records import (
    DATABASE_RECORD_VERSION,
    DATABASE_SIGNER,
    GENESIS,
    RECORD_VERSION,
)
from executor.audit.signing import Signer
from tests.audit.conftest import cli, relink, verify

ALICE_ORDER = ("cancelled", "hello", "state", "false", "nul", "last")  # chain_seq 1..6


def trusted(history) -> tuple[str, str]:
    return "--trust", Signer.from_file(history.key_file).public_key_hex


def only_break(report: dict) -> dict:
    assert not report["intact"], report
    assert len(report["breaks"]) == 1, report
    return report["breaks"][0]


def test_every_record_names_the_position_it_holds_executors_and_the_databases(copy, sql, history):
    rows = sql("SELECT id, chain_seq, chain_prev, result_record, signature FROM shell.commands"
               " WHERE session_id = %s ORDER BY chain_seq", (history.sessions["alice"],))
    assert [r["id"] for r in rows] == [history.ids[n] for n in ALICE_ORDER]
    for row in rows:
        record = json.loads(row["result_record"])
        version = DATABASE_RECORD_VERSION if record["signer"] == DATABASE_SIGNER else RECORD_VERSION
        assert (record["v"], record["chain_seq"], record["chain_prev"]) == (
            version, row["chain_seq"], row["chain_prev"])
    assert rows[0]["signature"] is None and all(r["signature"] for r in rows[1:])
    assert verify(copy, *trusted(history))[0] == 0


def test_a_deleted_signed_command_is_found_after_the_chain_is_re_linked(copy, sql, history):
    gone = history.ids["state"]
    sql("DELETE FROM shell.output_chunks WHERE command_id = %s", (gone,))
    sql("DELETE FROM shell.commands WHERE id = %s", (gone,))
    relink(sql, history.sessions["alice"],
           [history.ids[n] for n in ALICE_ORDER if n != "state"])
    code, report = verify(copy, *trusted(history))
    found = only_break(report)
    assert (code, found["command_id"], found["chain_seq"], found["cause"]) == (
        1, history.ids["false"], 3, "deleted")
    assert "sits at chain_seq 4" in found["detail"]


def test_reordered_signed_commands_are_found_after_the_chain_is_re_linked(copy, sql, history):
    order = [history.ids[n] for n in ("cancelled", "hello", "false", "state", "nul", "last")]
    relink(sql, history.sessions["alice"], order)
    code, report = verify(copy, *trusted(history))
    found = only_break(report)
    assert (code, found["command_id"], found["chain_seq"], found["cause"]) == (
        1, history.ids["false"], 3, "reordered")


def test_a_cut_tail_is_found_against_an_exported_head_and_only_then(copy, sql, history, tmp_path):
    heads = tmp_path / "heads.json"
    done = cli(copy, "audit", "head", "-o", str(heads))
    assert done.returncode == 0, done.stderr
    exported = json.loads(heads.read_text())
    assert exported[history.sessions["alice"]][0] == 6
    for name in ("nul", "last"):
        sql("DELETE FROM shell.output_chunks WHERE command_id = %s", (history.ids[name],))
        sql("DELETE FROM shell.commands WHERE id = %s", (history.ids[name],))
    relink(sql, history.sessions["alice"], [history.ids[n] for n in ALICE_ORDER[:4]])
    # Without a head kept elsewhere, a chain cut at its end is still a chain.
    assert verify(copy, *trusted(history))[0] == 0
    code, report = verify(copy, *trusted(history), "--head", str(heads))
    found = only_break(report)
    assert (code, found["session_id"], found["chain_seq"], found["cause"]) == (
        1, history.sessions["alice"], 6, "deleted")
    assert "chain_seq 5..6 missing at the end" in found["detail"]


def test_a_session_gone_entirely_is_found_against_an_exported_head(copy, sql, history, tmp_path):
    heads = tmp_path / "heads.json"
    assert cli(copy, "audit", "head", "-o", str(heads)).returncode == 0
    bob = history.sessions["bob"]
    sql("DELETE FROM shell.output_chunks o USING shell.commands c"
        " WHERE o.command_id = c.id AND c.session_id = %s", (bob,))
    sql("DELETE FROM shell.commands WHERE session_id = %s", (bob,))
    sql("UPDATE shell.lanes SET chain_seq = 0, chain_head = %s WHERE session_id = %s",
        (GENESIS, bob))
    found = only_break(verify(copy, *trusted(history), "--head", str(heads))[1])
    assert (found["session_id"], found["cause"]) == (bob, "deleted")


def test_verify_says_whose_keys_it_checked_with(copy, history):
    done = cli(copy, "audit", "verify")
    assert done.returncode == 0
    assert "as listed by the database, not --trust" in done.stderr
    done = cli(copy, "audit", "verify", *trusted(history))
    assert done.returncode == 0
    assert "only the 1 --trust key(s)" in done.stderr
