"""Secrets in the database: stored encrypted to the executors' key and only
so, listed by name and version, each user's own; every bad input refused
with its SQLSTATE, writing nothing."""

from __future__ import annotations

import base64

import pytest

from executor.secrets.key import SecretsKey
from tests.db.api_helpers import sqlstate, superuser_rows
from tests.support import call, create_user, executor, one, tenant

VALUE = "s3cr3t-value-for-tests"


@pytest.fixture(scope="module")
def key(tmp_path_factory) -> SecretsKey:
    return SecretsKey.from_file(tmp_path_factory.mktemp("secrets") / "key")


def register(db: str, key: SecretsKey) -> None:
    conn = executor(db)
    try:
        call(conn, "SELECT shell.register_secrets_key(%s, %s)", (key.fingerprint, key.public_key))
    finally:
        conn.close()


@pytest.fixture
def alice(db, key):
    register(db, key)
    return tenant(db, create_user(db, "alice"))


def set_secret(conn, name: str, value: str = VALUE) -> dict:
    return one(conn, "SELECT shell_api.set_secret(%s, %s)", (name, value))


def listed(conn) -> list[tuple[str, int]]:
    return [(r["name"], r["version"]) for r in call(conn, "SELECT * FROM shell_api.list_secrets()")]


def test_a_secret_is_stored_encrypted_to_the_key_and_opened_only_with_it(db, alice, key,
                                                                          tmp_path):
    assert set_secret(alice, "API_TOKEN") == {"name": "API_TOKEN", "version": 1}
    stored = superuser_rows(db, "SELECT ciphertext, key_fingerprint FROM shell.secrets")
    assert [r["key_fingerprint"] for r in stored] == [key.fingerprint]
    ciphertext = bytes(stored[0]["ciphertext"])
    assert VALUE.encode() not in ciphertext and key.decrypt(ciphertext) == VALUE
    with pytest.raises(ValueError):
        SecretsKey.from_file(tmp_path / "another-key").decrypt(ciphertext)


def test_listing_shows_names_and_versions_and_a_deleted_one_comes_back_newer(alice):
    set_secret(alice, "B_TOKEN")
    set_secret(alice, "A_TOKEN")
    set_secret(alice, "A_TOKEN", "another value")
    assert listed(alice) == [("A_TOKEN", 2), ("B_TOKEN", 1)]
    assert one(alice, "SELECT shell_api.delete_secret('A_TOKEN')") == {"name": "A_TOKEN",
                                                                       "version": 2}
    assert listed(alice) == [("B_TOKEN", 1)]
    # A version, once recorded, names one value only.
    assert set_secret(alice, "A_TOKEN")["version"] == 3


def test_tenants_cannot_read_the_table(alice):
    code, _ = sqlstate(alice, "SELECT * FROM shell.secrets")
    assert code == "42501"


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("1TOKEN", VALUE, "not a secret name: 1TOKEN"),
    ("API-TOKEN", VALUE, "not a secret name: API-TOKEN"),
    ("A" * 65, VALUE, "not a secret name: " + "A" * 65),
    ("PATH", VALUE, "secret name PATH belongs to the shell"),
    ("BASH_ENV", VALUE, "secret name BASH_ENV belongs to the shell"),
    ("PG_SHELL_X", VALUE, "secret name PG_SHELL_X belongs to the shell"),
    ("API_TOKEN", "abc", "a secret's value must be at least 4 characters"),
    ("API_TOKEN", "x" * 65537, "a secret's value must be at most 64 KiB (this one is 65537 bytes)"),
])
def test_bad_names_and_values_are_refused(db, alice, name, value, expected):
    assert sqlstate(alice, "SELECT shell_api.set_secret(%s, %s)", (name, value)) == ("22023",
                                                                                    expected)
    assert superuser_rows(db, "SELECT count(*) AS n FROM shell.secrets")[0]["n"] == 0


def test_a_value_of_64_kib_is_taken(alice):
    assert set_secret(alice, "BIG", "x" * 65536)["version"] == 1


def test_without_a_registered_key_a_secret_cannot_be_set(db):
    conn = tenant(db, create_user(db, "alice"))
    assert sqlstate(conn, "SELECT shell_api.set_secret('API_TOKEN', %s)", (VALUE,)) == (
        "55000", "no executor has registered a key to encrypt secrets to")


def test_a_key_pgcrypto_cannot_encrypt_to_is_refused_at_registration(db):
    conn = executor(db)
    error = sqlstate(conn, "SELECT shell.register_secrets_key(%s, 'not a key')", ("A" * 40,))
    assert error[0] == "22023" and error[1].startswith("not a public key secrets can be encrypted")


def test_another_tenants_secret_is_not_found(db, alice):
    bob = tenant(db, create_user(db, "bob"))
    set_secret(alice, "API_TOKEN")
    bobs = one(bob, "SELECT shell_api.create_session('b')")
    for sql, params in [("SELECT shell_api.set_session_secrets(%s, %s)", (bobs, ["API_TOKEN"])),
                        ("SELECT shell_api.create_session('x', NULL, %s)", (["API_TOKEN"],)),
                        ("SELECT shell_api.delete_secret('API_TOKEN')", None)]:
        assert sqlstate(bob, sql, params)[:2] == ("22023", "no secret API_TOKEN")
    assert listed(bob) == []
    assert listed(alice) == [("API_TOKEN", 1)]


def test_a_session_names_its_secrets_and_forks_keep_them(db, alice):
    set_secret(alice, "B_TOKEN")
    set_secret(alice, "A_TOKEN")
    sid = one(alice, "SELECT shell_api.create_session('s', NULL, %s)",
              (["B_TOKEN", "A_TOKEN", "B_TOKEN"],))
    assert superuser_rows(db, "SELECT secrets FROM shell.sessions WHERE id = %s",
                          (sid,))[0]["secrets"] == ["A_TOKEN", "B_TOKEN"]
    assert one(alice, "SELECT shell_api.set_session_secrets(%s, '{}')", (sid,)) == []


def test_a_session_may_name_at_most_100_secrets(alice):
    code, message = sqlstate(alice, "SELECT shell_api.create_session('s', NULL, %s)",
                             ([f"S{i}" for i in range(101)],))
    assert (code, message) == ("22023", "a session may use at most 100 secrets")


def test_a_user_may_hold_100_secrets(alice):
    for i in range(100):
        set_secret(alice, f"S{i}")
    assert sqlstate(alice, "SELECT shell_api.set_secret('S100', %s)", (VALUE,)) == (
        "PT429", "secret quota reached (100 secrets)")
    assert set_secret(alice, "S7")["version"] == 2  # setting one again is no new secret


def test_the_claim_hands_the_ciphertext_and_the_row_keeps_names_and_versions(db, alice, key):
    set_secret(alice, "API_TOKEN")
    sid = one(alice, "SELECT shell_api.create_session('s', NULL, %s)", (["API_TOKEN"],))
    cid = one(alice, "SELECT shell_api.submit_command(%s, 'true')", (sid,))
    worker = executor(db)
    [claimed] = call(worker, "SELECT * FROM shell.claim_commands('w1', 1)")
    [handed] = claimed["secrets"]
    assert (handed["name"], handed["version"], handed["key"]) == ("API_TOKEN", 1, key.fingerprint)
    assert key.decrypt(base64.b64decode(handed["value"])) == VALUE
    assert superuser_rows(db, "SELECT secrets FROM shell.commands WHERE id = %s",
                          (cid,))[0]["secrets"] == [{"name": "API_TOKEN", "version": 1}]
