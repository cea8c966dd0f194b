"""Templates in the database (0039, 0040): who may start a session on which
template, what the errors say, and that forks and replays keep their
source's template. The executor side (images per template) is in
tests/images/test_templates.py."""

from __future__ import annotations

import pytest

from tests.db.api_helpers import admin, error_of, run, sqlstate
from tests.support import call, create_user, executor, one, tenant

pytestmark = pytest.mark.postgres

DIGEST = "sha256:" + "d" * 64


@pytest.fixture
def alice(db):
    conn = tenant(db, create_user(db, "alice"))
    yield conn
    conn.close()


@pytest.fixture
def operator(db):
    conn = admin(db)
    yield conn
    conn.close()


def offer(operator, name: str, digest: str = DIGEST, *, is_open: bool = False) -> None:
    call(operator, "SELECT * FROM shell.define_template(%s, %s, %s)",
         (name, f"{name} tools", is_open))
    call(operator, "SELECT * FROM shell.promote_image(%s, %s, 1000)", (digest, name))


def test_a_new_session_is_on_base_and_base_is_listed_for_everyone(db, alice):
    sid = one(alice, "SELECT shell_api.create_session('x')")
    assert call(alice, "SELECT template FROM shell.sessions WHERE id = %s", (sid,)) == [
        {"template": "base"}]
    assert call(alice, "SELECT name, digest FROM shell_api.list_templates()") == [
        {"name": "base", "digest": None}]


def test_an_unknown_template_is_refused_naming_the_usable_ones(db, alice):
    exc = error_of(alice, "SELECT shell_api.create_session('x', 'nope')")
    assert (exc.pgcode, exc.diag.message_primary) == ("22023", "no template nope")
    assert exc.diag.message_hint == "Templates you may use: base."


def test_a_closed_template_is_refused_as_unknown_until_granted(db, alice, operator):
    offer(operator, "dev")
    forbidden = error_of(alice, "SELECT shell_api.create_session('x', 'dev')")
    unknown = error_of(alice, "SELECT shell_api.create_session('x', 'zzz')")
    assert (forbidden.pgcode, forbidden.diag.message_primary) == ("22023", "no template dev")
    hint = "Templates you may use: base."
    assert forbidden.diag.message_hint == unknown.diag.message_hint == hint

    assert call(operator, "SELECT * FROM shell.set_user_templates('alice', ARRAY['dev'])") == [
        {"template": "dev"}]
    sid = one(alice, "SELECT shell_api.create_session('x', 'dev')")
    assert one(alice, "SELECT template FROM shell.sessions WHERE id = %s", (sid,)) == "dev"
    assert call(alice, "SELECT name, digest, size_bytes FROM shell_api.list_templates()") == [
        {"name": "base", "digest": None, "size_bytes": None},
        {"name": "dev", "digest": DIGEST, "size_bytes": 1000}]
    # Granting nothing takes it back; the session made meanwhile stays on it.
    assert call(operator, "SELECT * FROM shell.set_user_templates('alice', '{}')") == []
    assert sqlstate(alice, "SELECT shell_api.create_session('x', 'dev')") == (
        "22023", "no template dev")


def test_an_open_template_is_for_everyone_once_it_has_an_image(db, alice, operator):
    call(operator, "SELECT * FROM shell.define_template('data', 'numpy', true)")
    assert sqlstate(alice, "SELECT shell_api.create_session('x', 'data')") == (
        "22023", "no template data")  # no image yet: nothing could run it
    call(operator, "SELECT * FROM shell.promote_image(%s, 'data')", (DIGEST,))
    assert one(alice, "SELECT shell_api.create_session('x', 'data')")


def test_the_claim_says_the_template_and_forks_and_replays_keep_it(db, alice, operator):
    offer(operator, "dev", is_open=True)
    sid = one(alice, "SELECT shell_api.create_session('x', 'dev')")
    first = one(alice, "SELECT shell_api.submit_command(%s, 'echo 1')", (sid,))
    run(db, first, "1\n")
    fork = one(alice, "SELECT shell_api.fork_session(%s)", (first,))
    replay = one(alice, "SELECT shell_api.replay_session(%s, %s)", (sid, first))
    assert {r["id"]: r["template"] for r in call(
        alice, "SELECT id, template FROM shell.sessions WHERE id IN (%s, %s)", (fork, replay))} == {
        fork: "dev", replay: "dev"}
    again = one(alice, "SELECT shell_api.submit_command(%s, 'echo 2')", (fork,))
    ex = executor(db)
    claimed = call(ex, "SELECT command_id, session_id, template "
                       "FROM shell.claim_commands('w', 1000, 30)")
    ex.close()
    assert {(r["session_id"], r["template"]) for r in claimed} == {(fork, "dev"), (replay, "dev")}
    assert again in {r["command_id"] for r in claimed}


def test_a_host_claims_only_the_templates_it_has_until_the_others_waited(db, alice, operator):
    offer(operator, "dev", is_open=True)
    call(operator, "SELECT * FROM shell.set_user_quota('alice', p_max_running => 3)")
    on_dev = [one(alice, "SELECT shell_api.create_session('x', 'dev')") for _ in range(2)]
    on_base = one(alice, "SELECT shell_api.create_session('y')")
    for sid in [*on_dev, on_base]:
        one(alice, "SELECT shell_api.submit_command(%s, 'true')", (sid,))
    ex = executor(db)
    claim = "SELECT session_id FROM shell.claim_commands('w', %s, 30, 'h', 0, %s, %s)"
    # A host without dev's image leaves dev's sessions to hosts that have it ...
    assert [r["session_id"] for r in call(ex, claim, (10, ["base"], 600000))] == [on_base]
    assert [r["session_id"] for r in call(ex, claim, (1, ["base", "dev"], 600000))] == on_dev[:1]
    # ... until they waited its time: then it takes them (to fail them, saying why).
    assert [r["session_id"] for r in call(ex, claim, (10, ["base"], 0))] == on_dev[1:]
    assert sqlstate(ex, claim, (10, None, 3600001)) == (
        "22023", "p_template_wait_ms must be between 0 and 3600000")
    ex.close()


def test_promotion_is_per_template_and_an_image_belongs_to_one(db, operator):
    other = "sha256:" + "e" * 64
    offer(operator, "dev")
    call(operator, "SELECT * FROM shell.promote_image(%s)", (other,))
    assert call(operator, "SELECT template, digest FROM shell.current_images()") == [
        {"template": "base", "digest": other}, {"template": "dev", "digest": DIGEST}]
    exc = error_of(operator, "SELECT * FROM shell.promote_image(%s, 'dev')", (other,))
    assert (exc.pgcode, exc.diag.message_primary) == ("22023", f"image {other} is template base's")
    assert sqlstate(operator, "SELECT * FROM shell.promote_image(%s, 'nope')", (DIGEST,)) == (
        "22023", "no template nope")


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT * FROM shell.define_template('Bad Name')", "not a template name: Bad Name"),
    ("SELECT * FROM shell.define_template('x', repeat('d', 501))",
     "a template description is at most 500 characters"),
    ("SELECT * FROM shell.set_user_templates('nobody', ARRAY['base'])", "no user nobody"),
    ("SELECT * FROM shell.set_user_templates('alice', ARRAY['nope'])", "no template nope"),
])
def test_bad_administrator_input_is_refused(db, alice, operator, sql, message):
    assert sqlstate(operator, sql) == ("22023", message)
