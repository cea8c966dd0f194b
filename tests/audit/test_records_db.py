"""complete_command accepts an executor's result record only when it agrees
with the command it completes and is signed by a registered key; the
database builds (unsigned) records for the transitions it makes itself."""

from __future__ import annotations

import json

import pytest

from executor.audit import verify as audit
from executor.audit.records import (
    DATABASE_SIGNER,
    GENESIS,
    ChainPosition,
    Completion,
    SignedRecord,
    canonical,
    result_record,
    sha256_hex,
)
from executor.audit.signing import Signer
from executor.db import audit as db_audit
from executor.db.database import as_admin
from executor.db.queue import ClaimedCommand, ExecutorDatabase
from executor.errors import LeaseLost
from tests.db.claim_support import (
    Worker,
    command_row,
    expire_lease,
    new_tenant,
    raises_sqlstate,
    superuser,
)
from tests.support import one


def _record(signer: Signer, row: dict, **changes) -> str:
    """The record an executor would sign for ``row``, with ``changes`` to its fields."""
    claimed = ClaimedCommand(
        command_id=row["id"], session_id=str(row["session_id"]), user_id=str(row["user_id"]),
        command=row["command"], cwd=row["cwd_before"], env=row["env_before"], attempt=1,
        image_digest=None, root=row["root_before"])
    outcome = Completion(status="done", exit_code=0, reason=None,
                         output_sha256=sha256_hex("hi\n"), image_digest="sha256:test",
                         started_at="2024-01-01T00:00:00.000000Z", duration_ms=5,
                         cwd_after="/home/sandbox/x", env_after={"A": "1"})
    record = json.loads(result_record(signer=signer.key_id, worker_id="w1", claimed=claimed,
                                      outcome=outcome, position=ChainPosition(1, GENESIS)))
    return canonical({**record, **changes})


def _complete(worker: Worker, cid: int, record: str, signature: str | None,
              key_id: str | None) -> None:
    worker.conn.cursor().execute("SELECT shell.complete_command(%s, 'w1', 1, %s, %s, %s)",
                                 (cid, record, signature, key_id))


def _verify(dsn: str) -> audit.Report:
    with as_admin(dsn, "test") as admin:
        keys = {k["key_id"]: k["public_key"] for k in db_audit.keys(admin)}
        return audit.verify(db_audit.history(admin), keys)


def test_a_signed_record_that_agrees_is_chained_and_one_that_does_not_is_refused(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    cid = alice.submit(session, "echo hi")
    worker = Worker(db, "w1")
    signer = Signer.generate()
    assert one(worker.conn, "SELECT shell.register_signing_key(%s, 'w1')",
               (signer.public_key_hex,)) == signer.key_id
    claimed = worker.claim()[0]
    worker.start(claimed)
    worker.append(claimed, 0, "hi\n")
    row = command_row(superuser(db), cid)
    # The outcome (status, exit code, cwd and env after) is read from the
    # record; what the row already holds must agree with it.
    for wrong, field in (({"cwd_before": "/tmp"}, "cwd_before"),
                         ({"env_before": {"B": "2"}}, "env_before"), ({"attempt": 2}, "attempt"),
                         ({"worker_id": "w2"}, "worker_id"),
                         ({"image_digest": "sha256:other"}, "image_digest"),
                         ({"command_id": cid + 1}, "command_id"),
                         ({"output_sha256": sha256_hex("")}, "output_sha256"),
                         ({"chain_seq": 2}, "chain_seq"), ({"chain_prev": "f" * 64}, "chain_prev")):
        bad = _record(signer, row, **wrong)
        with raises_sqlstate("22023", f"disagrees with the command on {field}"):
            _complete(worker, cid, bad, signer.sign(bad), signer.key_id)
    stranger = Signer.generate()
    good_for_stranger = _record(stranger, row)
    with raises_sqlstate("22023", "not signed by a registered key"):
        _complete(worker, cid, good_for_stranger, stranger.sign(good_for_stranger), stranger.key_id)
    good = _record(signer, row)
    _complete(worker, cid, good, signer.sign(good), signer.key_id)
    done = command_row(superuser(db), cid)
    assert (done["status"], done["result_record"], done["key_id"], done["chain_seq"]) == (
        "done", good, signer.key_id, 1)
    assert (done["exit_code"], done["cwd_after"], done["env_after"], done["duration_ms"]) == (
        0, "/home/sandbox/x", {"A": "1"}, 5)
    assert _verify(db).intact


def test_the_database_records_what_it_settles_itself_unsigned(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    lost, cancelled = alice.submit(session, "sleep 1"), alice.submit(session, "echo never")
    worker = Worker(db, "w1")
    worker.start(worker.claim()[0])
    assert alice.cancel(cancelled)
    su = superuser(db)
    expire_lease(su, lost)
    worker.expire_leases()
    rows = [command_row(su, cid) for cid in (cancelled, lost)]
    assert [(r["status"], r["chain_seq"], r["signature"]) for r in rows] == [("cancelled", 1, None),
                                                                             ("failed", 2, None)]
    assert [json.loads(r["result_record"])["signer"] for r in rows] == [DATABASE_SIGNER] * 2
    assert rows[1]["chain_prev"] == rows[0]["chain_hash"]
    report = _verify(db)
    assert (report.intact, report.links) == (True, 2)


def test_the_executor_reads_the_position_signs_and_completes_in_one_transaction(db):
    alice = new_tenant(db, "alice")
    session = alice.session()
    first, second = alice.submit(session, "echo one"), alice.submit(session, "echo two")
    assert alice.cancel(second)  # the database's record takes chain_seq 1 first
    signer = Signer.generate()
    executor_db = ExecutorDatabase(db, "shell_executor", persistent=False)
    try:
        db_audit.register_key(executor_db, signer.public_key_hex, "w1")
        claimed = executor_db.claim("w1", 1, 30)[0]
        assert claimed.command_id == first
        executor_db.mark_started(claimed, "w1", "ctr", "sha256:test", "runc")
        seen: list[ChainPosition] = []

        def sign(position: ChainPosition) -> SignedRecord:
            seen.append(position)
            text = result_record(signer=signer.key_id, worker_id="w1", claimed=claimed,
                                 outcome=Completion(status="done", exit_code=0, reason=None,
                                                    output_sha256=sha256_hex(""),
                                                    image_digest="sha256:test", runtime="runc"),
                                 position=position)
            return SignedRecord(text, signer.sign(text), signer.key_id)

        executor_db.complete(claimed, "w1", sign)
        with pytest.raises(LeaseLost):  # completed: no position is handed out any more
            executor_db.complete(claimed, "w1", sign)
    finally:
        executor_db.close()
    cancelled_row = command_row(superuser(db), second)
    assert seen == [ChainPosition(2, cancelled_row["chain_hash"])]
    row = command_row(superuser(db), first)
    record = json.loads(row["result_record"])
    assert (row["chain_seq"], row["chain_prev"], record["chain_seq"], record["chain_prev"]) == (
        2, cancelled_row["chain_hash"], 2, cancelled_row["chain_hash"])
    assert _verify(db).intact
