"""Claiming and the executor's transitions, against a real PostgreSQL with
real concurrency: every worker and watcher is a thread with its own
connection, acting as shell_executor exactly as the daemon does."""

from __future__ import annotations

import random
import threading
from collections import Counter, defaultdict

import pytest

from tests.db.claim_support import (
    LANE_MISMATCHES,
    Samples,
    Worker,
    command_row,
    expire_lease,
    new_tenant,
    raises_sqlstate,
    superuser,
)
from tests.support import call, executor

# A lost command would keep the workers polling forever: fail instead.
HANG_GUARD = pytest.mark.timeout(120)


def run_threads(targets: list, *, watcher=None) -> None:
    """Runs the targets in threads (plus an optional watcher that runs until
    they finish), each given an event set when any of them fails, and
    re-raises the first error."""
    errors: list[BaseException] = []
    stop = threading.Event()

    def guarded(fn, *args):
        try:
            fn(*args)
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=guarded, args=(t, stop)) for t in targets]
    watch = threading.Thread(target=guarded, args=(watcher, stop)) if watcher else None
    if watch:
        watch.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    if watch:
        watch.join()
    if errors:
        raise errors[0]


# --- order and exclusivity within a session ---------------------------------

def test_commands_of_a_session_are_claimed_in_submission_order_one_at_a_time(db):
    alice = new_tenant(db, "alice")
    sid = alice.session()
    ids = [alice.submit(sid, f"echo {i}") for i in range(4)]
    worker = Worker(db, "w1")
    for position, expected in enumerate(ids):
        claimed = worker.claim(limit=10)
        assert [(c.id, c.session_id, c.attempt) for c in claimed] == [(expected, sid, 1)]
        # Nothing else of the session is claimable while it is claimed ...
        assert worker.claim(limit=10) == []
        worker.start(claimed[0])
        # ... or running.
        assert worker.claim(limit=10) == []
        worker.complete(claimed[0], cwd=f"/tmp/{position}", env={"N": str(position)})
    assert worker.claim(limit=10) == []
    rows = call(superuser(db), "SELECT id, status, attempts FROM shell.commands ORDER BY id")
    assert rows == [{"id": i, "status": "done", "attempts": 1} for i in ids]


def test_a_claim_carries_the_cwd_and_env_left_by_the_previous_command(db):
    alice = new_tenant(db, "alice")
    sid = alice.session()
    first, second = alice.submit(sid, "cd /tmp"), alice.submit(sid, "export A=1")
    worker = Worker(db, "w1")
    [c1] = worker.claim()
    assert (c1.id, c1.cwd, c1.env) == (first, "/home/sandbox", {})
    worker.start(c1)
    worker.complete(c1, cwd="/tmp", env={"A": "1"})
    [c2] = worker.claim()
    assert (c2.id, c2.cwd, c2.env) == (second, "/tmp", {"A": "1"})


def test_a_cancelled_pending_command_is_never_claimed_and_does_not_block_its_session(db):
    alice = new_tenant(db, "alice")
    sid = alice.session()
    first, second, third = (alice.submit(sid, f"echo {i}") for i in range(3))
    worker = Worker(db, "w1")
    [c1] = worker.claim(limit=5)
    assert c1.id == first
    assert alice.cancel(second) is True
    worker.start(c1)
    worker.complete(c1)
    assert [c.id for c in worker.claim(limit=5)] == [third]
    assert command_row(superuser(db), second)["status"] == "cancelled"


def test_the_database_refuses_a_second_active_command_in_a_session(db):
    alice = new_tenant(db, "alice")
    sid = alice.session()
    first, second = alice.submit(sid, "sleep 1"), alice.submit(sid, "echo 2")
    worker = Worker(db, "w1")
    [c1] = worker.claim()
    worker.start(c1)
    su = superuser(db)
    for status in ("claimed", "running"):
        with raises_sqlstate("23505") as info:
            call(su, "UPDATE shell.commands SET status = %s, worker_id = 'intruder', attempts = 1, "
                     "claimed_at = now(), started_at = now(), lease_expires_at = now() + interval "
                     "'30 s' WHERE id = %s", (status, second))
        assert info.value.diag.constraint_name == "commands_one_active_per_session"
    assert command_row(su, first)["status"] == "running"
    assert command_row(su, second)["status"] == "pending"


@HANG_GUARD
def test_concurrent_claimers_never_have_two_active_commands_in_a_session(db):
    tenants = [new_tenant(db, f"user{u}", max_running=50) for u in range(4)]
    sessions = {t.uid: [t.session() for _ in range(3)] for t in tenants}
    per_session = 6
    all_ids = []
    for t in tenants:
        for sid in sessions[t.uid]:
            all_ids += [t.submit(sid, f"echo {i}") for i in range(per_session)]
    total = len(all_ids)

    lock = threading.Lock()
    samples = Samples()
    active: dict[str, set[int]] = defaultdict(set)  # session -> its commands known to be active
    overlaps: list[tuple[str, set[int], int]] = []
    finished: list[int] = []
    claimers: set[str] = set()

    def work(stop: threading.Event, worker_id: str) -> None:
        worker = Worker(db, worker_id)
        rng = random.Random(worker_id)
        while not stop.is_set():
            with lock:
                if len(finished) >= total:
                    break
            for cmd in worker.claim(limit=rng.randint(1, 3), lease_seconds=60):
                with lock:
                    claimers.add(worker_id)
                    if active[cmd.session_id]:
                        overlaps.append((cmd.session_id, set(active[cmd.session_id]), cmd.id))
                    active[cmd.session_id].add(cmd.id)
                worker.start(cmd)
                worker.append(cmd, 0, f"out {cmd.id}\n")
                samples.wait_for_a_fresh_one(stop)
                with lock:
                    # Forgotten just before completing: the next command of
                    # the session can only be claimed after this commits.
                    active[cmd.session_id].discard(cmd.id)
                worker.complete(cmd)
                with lock:
                    finished.append(cmd.id)
        worker.close()

    mismatches: list = []
    busy_samples = 0

    def watch(stop: threading.Event) -> None:
        nonlocal busy_samples
        su = superuser(db)
        while not stop.is_set():
            [sample] = call(su, f"""
                SELECT (SELECT count(*) FROM shell.commands
                        WHERE status IN ('claimed', 'running')) AS busy,
                       (SELECT coalesce(json_agg(m), '[]') FROM ({LANE_MISMATCHES}) m) AS bad""")
            busy_samples += sample["busy"] > 0
            mismatches.extend(sample["bad"])
            samples.took_one()
        su.close()

    run_threads([lambda stop, i=i: work(stop, f"w{i}") for i in range(6)], watcher=watch)

    assert overlaps == []
    assert mismatches == []
    assert sorted(finished) == sorted(all_ids)
    assert busy_samples > 0, "the watcher never saw work in progress"
    assert len(claimers) > 1, "only one worker ever claimed: no concurrency was exercised"
    su = superuser(db)
    assert call(su, LANE_MISMATCHES) == []
    assert call(su, "SELECT DISTINCT status FROM shell.commands") == [{"status": "done"}]


# --- no head-of-line blocking ---------------------------------------------

def _b_claims_with_a_deadline(db: str) -> Worker:
    b = Worker(db, "wb")
    # A block here must fail the test (57014), not hang it.
    call(b.conn, "SET statement_timeout = '5s'")
    return b


def test_a_claim_holding_one_session_does_not_delay_another_session(db):
    alice, bob = new_tenant(db, "alice"), new_tenant(db, "bob")
    x = alice.session("x")
    x1, x2 = alice.submit(x, "sleep 100"), alice.submit(x, "echo x2")
    y = bob.session("y")
    y1 = bob.submit(y, "echo y1")

    a = Worker(db, "wa")
    a.conn.autocommit = False  # A claims inside a transaction it keeps open
    try:
        assert [c.id for c in a.claim(limit=1)] == [x1]
        b = _b_claims_with_a_deadline(db)
        assert [(c.id, c.session_id) for c in b.claim(limit=10)] == [(y1, y)]
        a.conn.commit()
        # X's second command waits for its first, whoever asks.
        assert b.claim(limit=10) == []
    finally:
        a.conn.rollback()
    assert command_row(superuser(db), x2)["status"] == "pending"


def test_a_session_locked_by_an_unfinished_transaction_does_not_delay_another_session(db):
    alice, bob = new_tenant(db, "alice"), new_tenant(db, "bob")
    x = alice.session("x")
    alice.submit(x, "echo x1")
    y = bob.session("y")
    y1 = bob.submit(y, "echo y1")
    # A tenant's submit to X is in flight: X's lane row is locked.
    alice.conn.autocommit = False
    try:
        alice.submit(x, "echo x2")
        b = _b_claims_with_a_deadline(db)
        assert [(c.id, c.session_id) for c in b.claim(limit=10)] == [(y1, y)]
    finally:
        alice.conn.rollback()
        alice.conn.autocommit = True


# --- many workers, many sessions ---------------------------------------------

@HANG_GUARD
def test_every_command_runs_exactly_once_in_session_order_with_many_workers(db):
    users, sessions_per_user, per_session, workers = 8, 5, 8, 6
    tenants = [new_tenant(db, f"user{u}", max_running=100) for u in range(users)]
    owned = {t.uid: [t.session() for _ in range(sessions_per_user)] for t in tenants}
    expected: dict[str, list[int]] = {sid: [] for sids in owned.values() for sid in sids}
    # Interleave submissions across sessions, as real tenants would.
    for i in range(per_session):
        for t in tenants:
            for sid in owned[t.uid]:
                expected[sid].append(t.submit(sid, f"echo {i}"))
    total = sum(len(v) for v in expected.values())
    assert total == users * sessions_per_user * per_session

    lock = threading.Lock()
    claims: list[tuple[int, int, str]] = []  # (command, attempt, worker)
    claim_order: dict[str, list[int]] = defaultdict(list)
    completion_order: dict[str, list[int]] = defaultdict(list)

    def work(stop: threading.Event, worker_id: str) -> None:
        worker = Worker(db, worker_id)
        rng = random.Random(worker_id)
        while not stop.is_set():
            with lock:
                if sum(len(v) for v in completion_order.values()) >= total:
                    break
            batch = worker.claim(limit=rng.randint(1, 10), lease_seconds=120)
            with lock:
                for cmd in batch:
                    claims.append((cmd.id, cmd.attempt, worker_id))
                    claim_order[cmd.session_id].append(cmd.id)
            for cmd in batch:
                worker.start(cmd)
                with lock:
                    # Recorded before completing: the session's next command
                    # cannot be claimed until this completion commits.
                    completion_order[cmd.session_id].append(cmd.id)
                worker.complete(cmd)
        worker.close()

    run_threads([lambda stop, i=i: work(stop, f"w{i}") for i in range(workers)])

    ids = Counter(c[0] for c in claims)
    assert sorted(ids) == sorted(i for v in expected.values() for i in v)
    assert set(ids.values()) == {1}, "a command was claimed more than once"
    assert {c[1] for c in claims} == {1}
    assert len({c[2] for c in claims}) > 1, (
        "only one worker ever claimed: no concurrency was exercised")
    assert dict(claim_order) == expected
    assert dict(completion_order) == expected
    su = superuser(db)
    assert call(su, "SELECT status, count(*) AS n FROM shell.commands GROUP BY status") == [
        {"status": "done", "n": total}]
    # The database's own clock agrees: each command started after the one
    # before it in its session had completed.
    assert call(su, """
        SELECT c.id FROM shell.commands c
        JOIN shell.commands p ON p.session_id = c.session_id AND p.id < c.id
        WHERE c.started_at < p.completed_at""") == []
    assert call(su, LANE_MISMATCHES) == []


# --- per-user quota ----------------------------------------------------------

def test_max_running_one_lets_one_command_of_the_user_run_while_others_are_claimed(db):
    alice = new_tenant(db, "alice", max_running=1)
    bob = new_tenant(db, "bob", max_running=10)
    a1, a2 = alice.session(), alice.session()
    b1, b2 = bob.session(), bob.session()
    a_ids = [alice.submit(s, "echo a") for s in (a1, a2) for _ in range(2)]
    b_ids = [bob.submit(s, "echo b") for s in (b1, b2) for _ in range(2)]

    w1, w2 = Worker(db, "w1"), Worker(db, "w2")
    first = w1.claim(limit=10)
    by_user = Counter(c.user_id for c in first)
    assert by_user == {alice.uid: 1, bob.uid: 2}
    # Alice's other session is ready but over quota; Bob's are both busy.
    assert w2.claim(limit=10) == []
    alice_cmd = next(c for c in first if c.user_id == alice.uid)
    w1.start(alice_cmd)
    w1.complete(alice_cmd)
    second = w2.claim(limit=10)
    assert [c.user_id for c in second] == [alice.uid]
    assert second[0].id in a_ids and second[0].id != alice_cmd.id
    assert set(c.id for c in first if c.user_id == bob.uid) <= set(b_ids)


@HANG_GUARD
def test_max_running_holds_under_concurrent_claimers(db):
    alice = new_tenant(db, "alice", max_running=1)
    bob = new_tenant(db, "bob", max_running=10)
    a_sessions = [alice.session() for _ in range(3)]
    b_sessions = [bob.session() for _ in range(3)]
    a_ids = [alice.submit(s, "echo a") for s in a_sessions for _ in range(5)]
    b_ids = [bob.submit(s, "echo b") for s in b_sessions for _ in range(5)]
    total = len(a_ids) + len(b_ids)

    lock = threading.Lock()
    samples = Samples()
    alice_active: set[int] = set()
    alice_overlaps: list[tuple[int, ...]] = []
    finished: list[int] = []

    def work(stop: threading.Event, worker_id: str) -> None:
        worker = Worker(db, worker_id)
        rng = random.Random(worker_id)
        while not stop.is_set():
            with lock:
                if len(finished) >= total:
                    break
            for cmd in worker.claim(limit=rng.randint(1, 4), lease_seconds=60):
                with lock:
                    if cmd.user_id == alice.uid:
                        if alice_active:
                            alice_overlaps.append((*alice_active, cmd.id))
                        alice_active.add(cmd.id)
                worker.start(cmd)
                if cmd.user_id == alice.uid:
                    samples.wait_for_a_fresh_one(stop)
                with lock:
                    alice_active.discard(cmd.id)
                worker.complete(cmd)
                with lock:
                    finished.append(cmd.id)
        worker.close()

    seen_alice_over_quota: list[int] = []
    alice_busy_samples = 0

    def watch(stop: threading.Event) -> None:
        nonlocal alice_busy_samples
        su = superuser(db)
        while not stop.is_set():
            n = call(su, "SELECT count(*) AS n FROM shell.commands WHERE user_id = %s"
                         " AND status IN ('claimed', 'running')", (alice.uid,))[0]["n"]
            alice_busy_samples += n > 0
            if n > 1:
                seen_alice_over_quota.append(n)
            samples.took_one()
        su.close()

    run_threads([lambda stop, i=i: work(stop, f"w{i}") for i in range(5)], watcher=watch)

    assert alice_overlaps == []
    assert seen_alice_over_quota == []
    assert sorted(finished) == sorted(a_ids + b_ids)
    assert alice_busy_samples >= len(a_ids), (
        "the watcher did not see each of alice's commands running")


# --- leases --------------------------------------------------------------------

def test_an_unstarted_command_whose_lease_expired_is_claimed_again_at_the_head_of_its_session(db):
    alice, bob = new_tenant(db, "alice"), new_tenant(db, "bob")
    sid = alice.session()
    first, second = alice.submit(sid, "echo 1"), alice.submit(sid, "echo 2")
    other = bob.session()
    bob.submit(other, "echo other")
    old, new = Worker(db, "old"), Worker(db, "new")
    claimed = {c.id: c for c in old.claim(limit=2)}
    assert first in claimed and second not in claimed and len(claimed) == 2
    su = superuser(db)
    expire_lease(su, first)

    # Only the expired lease is settled; bob's live lease is left alone.
    assert new.expire_leases() == {first: "pending"}
    row = command_row(su, first)
    assert (row["status"], row["worker_id"], row["lease_expires_at"], row["attempts"]) == (
        "pending", None, None, 1)
    other_row = call(su, "SELECT status, worker_id FROM shell.commands WHERE session_id = %s",
                     (other,))
    assert other_row == [{"status": "claimed", "worker_id": "old"}]

    [again] = new.claim(limit=10)
    assert (again.id, again.attempt) == (first, 2)
    with raises_sqlstate("PS001", "lease lost"):
        old.start(first, attempt=1)
    with raises_sqlstate("PS001", "lease lost"):
        old.complete(first, attempt=1)
    # The old worker cannot borrow the new attempt number either.
    with raises_sqlstate("PS001", "lease lost"):
        old.complete(first, attempt=2)
    new.start(again)
    new.complete(again)
    [nxt] = new.claim(limit=10)
    assert nxt.id == second
    row = command_row(su, first)
    assert (row["status"], row["worker_id"], row["attempts"]) == ("done", "new", 2)


def test_a_lease_runs_out_on_the_database_clock(db):
    alice = new_tenant(db, "alice")
    sid = alice.session()
    first = alice.submit(sid, "echo 1")
    worker = Worker(db, "w1")
    [c] = worker.claim(lease_seconds=1)
    assert worker.expire_leases() == {}  # not yet
    call(worker.conn, "SELECT pg_sleep(1.2)")
    assert worker.expire_leases() == {first: "pending"}
    assert [(x.id, x.attempt) for x in worker.claim()] == [(first, 2)]
    assert c.attempt == 1


def test_a_started_command_whose_lease_expired_fails_as_executor_lost_and_is_never_run_again(db):
    alice = new_tenant(db, "alice")
    sid = alice.session()
    first, second = alice.submit(sid, "rm -rf data"), alice.submit(sid, "echo 2")
    old, new = Worker(db, "old"), Worker(db, "new")
    [c] = old.claim()
    old.start(c)
    old.append(c, 0, "partial ")
    su = superuser(db)
    expire_lease(su, first)
    assert new.expire_leases() == {first: "failed"}
    row = command_row(su, first)
    assert (row["status"], row["reason"], row["attempts"], row["output"]) == (
        "failed", "executor lost", 1, "partial ")
    assert row["completed_at"] is not None and row["cwd_after"] == row["cwd_before"]
    # The session moves on to its next command, never back to this one.
    assert [(x.id, x.attempt) for x in new.claim(limit=10)] == [(second, 1)]
    with raises_sqlstate("PS001", "lease lost"):
        old.append(c, 1, "more")
    with raises_sqlstate("PS001", "lease lost"):
        old.complete(c)
    assert new.expire_leases() == {}
    assert command_row(su, first)["status"] == "failed"


def test_a_command_that_never_starts_gives_up_after_five_attempts(db):
    alice = new_tenant(db, "alice")
    sid = alice.session()
    first, second = alice.submit(sid, "echo 1"), alice.submit(sid, "echo 2")
    worker = Worker(db, "w1")
    su = superuser(db)
    outcomes = []
    for attempt in range(1, 6):
        [c] = worker.claim(limit=10)
        assert (c.id, c.attempt) == (first, attempt)
        expire_lease(su, first)
        outcomes.append(worker.expire_leases()[first])
    assert outcomes == ["pending"] * 4 + ["failed"]
    row = command_row(su, first)
    assert (row["status"], row["attempts"]) == ("failed", 5)
    assert "gave up" in row["reason"]
    assert [c.id for c in worker.claim(limit=10)] == [second]


def test_heartbeat_renews_only_leases_the_worker_holds_and_reports_cancel_requests(db):
    alice = new_tenant(db, "alice", max_running=10)
    s1, s2, s3, s4 = (alice.session() for _ in range(4))
    c1, c2, c3, c4 = (alice.submit(s, "sleep 9") for s in (s1, s2, s3, s4))
    w1, w2 = Worker(db, "w1"), Worker(db, "w2")
    assert {c.id for c in w1.claim(limit=3)} == {c1, c2, c3}
    [mine] = w2.claim()
    assert mine.id == c4
    w1.start(c1, attempt=1)
    w1.start(c3, attempt=1)
    w1.complete(c3, attempt=1)
    su = superuser(db)
    call(su, "UPDATE shell.commands SET lease_expires_at = '2000-01-01Z' WHERE id = ANY (%s)",
         ([c1, c2, c3, c4],))

    assert alice.cancel(c1) is True
    renewed = w1.heartbeat([(c1, 1), (c2, 2), (c3, 1), (c4, 1)], lease_seconds=60)
    # c2: wrong attempt; c3: finished; c4: someone else's.
    assert renewed == {c1: True}
    leases = {r["id"]: r
              for r in call(su, "SELECT id, lease_expires_at > now() + interval '59 s' AS renewed,"
                               " lease_expires_at = '2000-01-01Z' AS untouched"
                               " FROM shell.commands WHERE id = ANY (%s)", ([c1, c2, c4],))}
    assert leases[c1]["renewed"] and not leases[c1]["untouched"]
    assert leases[c2]["untouched"] and leases[c4]["untouched"]
    assert w1.heartbeat([(c1, 1), (c2, 1)]) == {c1: True, c2: False}


def test_settle_worker_returns_unstarted_commands_and_fails_started_ones_of_that_worker_only(db):
    alice = new_tenant(db, "alice", max_running=10)
    s1, s2, s3, s4 = (alice.session() for _ in range(4))
    c1, c2, c3, c4 = (alice.submit(s, "echo") for s in (s1, s2, s3, s4))
    w1, w2 = Worker(db, "w1"), Worker(db, "w2")
    assert {c.id for c in w1.claim(limit=3)} == {c1, c2, c3}
    assert [c.id for c in w2.claim()] == [c4]
    w1.start(c3, attempt=1)
    su = superuser(db)
    w2_before = command_row(su, c4)

    # c2's container exists although it was never marked running.
    restarted = Worker(db, "w1")
    assert restarted.settle([c2]) == {c1: "pending", c2: "failed", c3: "failed"}
    rows = {r["id"]: r
            for r in call(su, "SELECT id, status, reason, worker_id FROM shell.commands")}
    assert (rows[c1]["status"], rows[c1]["worker_id"]) == ("pending", None)
    assert (rows[c2]["status"], rows[c2]["reason"]) == ("failed", "executor lost")
    assert (rows[c3]["status"], rows[c3]["reason"]) == ("failed", "executor lost")
    assert command_row(su, c4) == w2_before
    assert [(c.id, c.attempt) for c in w2.claim(limit=10)] == [(c1, 2)]
    assert restarted.settle([]) == {}
    assert call(su, LANE_MISMATCHES) == []


# --- transitions check status and owner --------------------------------------

def test_transitions_refuse_the_wrong_status_or_owner_or_attempt(db):
    alice = new_tenant(db, "alice")
    sid = alice.session()
    cid = alice.submit(sid, "echo")
    owner, thief = Worker(db, "owner"), Worker(db, "thief")
    [c] = owner.claim()
    su = superuser(db)

    with raises_sqlstate("PS001", "lease lost"):
        owner.append(c, 0, "too early")  # claimed, not running
    with raises_sqlstate("PS001", "lease lost"):
        thief.start(cid, attempt=1)
    owner.start(c)
    before = command_row(su, cid)
    owner.start(c)  # twice for the same container: a retry, changes nothing
    with raises_sqlstate("PS001", "lease lost"):
        thief.complete(cid, attempt=1)
    with raises_sqlstate("PS001", "lease lost"):
        owner.complete(cid, attempt=0)
    with raises_sqlstate("PS001", "lease lost"):
        thief.append(cid, 0, "x", attempt=1)
    assert command_row(su, cid) == before

    owner.append(c, 0, "ok")
    owner.complete(c)
    with raises_sqlstate("PS001", "lease lost"):
        owner.complete(c)  # already done
    assert command_row(su, cid)["status"] == "done"


@pytest.mark.parametrize("kwargs", [
    {"status": "running"}, {"status": "pending"}, {"status": "claimed"}, {"status": "bogus"},
    {"status": None},
    {"cwd": "relative/dir"}, {"cwd": ""},
    {"env": {"A": 1}}, {"env": {"A": None}}, {"env": {"A": {"nested": "x"}}}, {"env": ["A=1"]},
    {"env": "A=1"},
], ids=lambda k: "-".join(f"{a}={b!r}" for a, b in k.items()))
def test_complete_refuses_an_invalid_result_with_22023(db, kwargs):
    alice = new_tenant(db, "alice")
    sid = alice.session()
    cid = alice.submit(sid, "echo")
    worker = Worker(db, "w1")
    [c] = worker.claim()
    worker.start(c)
    su = superuser(db)
    before = command_row(su, cid)
    with raises_sqlstate("22023"):
        worker.complete(c, **kwargs)
    assert command_row(su, cid) == before
    assert call(su, "SELECT cwd, env FROM shell.sessions WHERE id = %s", (sid,)) == [
        {"cwd": "/home/sandbox", "env": {}}]
    worker.complete(c)
    assert command_row(su, cid)["status"] == "done"


@pytest.mark.parametrize("record", [
    None, "", "not json", "[1]", '"done"', '{"status": "done", "exit_code": "zero"}',
    '{"status": "done", "exit_code": 1e99}', '{"status": "done", "truncated": "maybe"}',
    '{"status": "done", "duration_ms": [1]}', '{"status": "done", "env_after": null}',
    '{"status": "done", "cwd_after": 7}',
])
def test_complete_refuses_a_malformed_result_record_with_22023(db, record):
    alice = new_tenant(db, "alice")
    cid = alice.submit(alice.session(), "echo")
    worker = Worker(db, "w1")
    [c] = worker.claim()
    worker.start(c)
    su = superuser(db)
    before = command_row(su, cid)
    with raises_sqlstate("22023"):
        worker.complete_with(c, record)
    assert command_row(su, cid) == before


def test_claim_refuses_invalid_worker_ids_limits_and_leases(db):
    conn = executor(db)
    for args in [("", 1, 30), ("bad id", 1, 30), (None, 1, 30), ("w", 0, 30), ("w", 1001, 30),
                 ("w", 1, 0), ("w", 1, 3601)]:
        with raises_sqlstate("22023"):
            call(conn, "SELECT * FROM shell.claim_commands(%s, %s, %s)", args)


def test_a_command_whose_container_was_created_is_never_claimed_again(db):
    # The container exists but mark_started never arrived (the executor
    # died between create and start): it may have run, so expiry fails it.
    alice = new_tenant(db, "alice")
    sid = alice.session()
    first, second = alice.submit(sid, "rm -rf data"), alice.submit(sid, "echo 2")
    old, new = Worker(db, "old"), Worker(db, "new")
    [c] = old.claim()
    call(old.conn, "SELECT shell.mark_created(%s, %s, %s, %s)", (c.id, old.id, c.attempt, "ctr-x"))
    su = superuser(db)
    expire_lease(su, first)
    assert new.expire_leases() == {first: "failed"}
    row = command_row(su, first)
    assert (row["status"], row["reason"], row["attempts"], row["container_id"]) == (
        "failed", "executor lost", 1, "ctr-x")
    assert [x.id for x in new.claim(limit=10)] == [second]


def test_mark_started_repeated_for_the_same_container_is_a_no_op(db):
    alice = new_tenant(db, "alice")
    sid = alice.session()
    alice.submit(sid, "echo 1")
    worker = Worker(db, "w1")
    [c] = worker.claim()
    worker.start(c)
    su = superuser(db)
    started_at = command_row(su, c.id)["started_at"]
    worker.start(c)  # a retry after a lost answer
    row = command_row(su, c.id)
    assert (row["status"], row["started_at"]) == ("running", started_at)
    with raises_sqlstate("PS001", "lease lost"):
        call(worker.conn, "SELECT shell.mark_started(%s, %s, %s, %s, %s)",
             (c.id, worker.id, c.attempt, "another-container", "sha256:test"))


def test_a_tenant_at_its_quota_does_not_starve_other_tenants(db):
    # Many ready sessions of a tenant at max_running fill the front of the
    # scan; skipping them moves them back, so another tenant's session is
    # reached within a few claims.
    hog = new_tenant(db, "hog", max_running=1, max_sessions=200, max_queued=200)
    for _ in range(120):
        hog.submit(hog.session(), "sleep 1")
    other = new_tenant(db, "other")
    wanted = other.submit(other.session(), "echo hi")
    worker = Worker(db, "w1")
    seen: list[int] = []
    for _ in range(10):
        seen += [c.id for c in worker.claim(limit=1)]
        if wanted in seen:
            break
    assert wanted in seen
