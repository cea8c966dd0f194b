"""Secrets: a command gets its session's secrets in its environment, and
their values are in no table, record, export or log afterwards, whether the
command printed one (masked, even split across output pieces), exported it
under another name or its own, or went into a directory named after it. The
files a command writes are the user's: their names and contents are stored
as written.
Forks and replays use the same secrets, by name. An executor that cannot
open a secret fails the command and says why."""

from __future__ import annotations

import json
import secrets

import pytest

from executor.audit.records import RECORD_VERSION
from executor.secrets.key import SecretsKey
from tests.audit.conftest import cli, verify
from tests.executor.conftest import Shell
from tests.support import call, connect_as, one


def set_secret(shell: Shell, name: str, value: str) -> int:
    return one(shell.conn, "SELECT (shell_api.set_secret(%s, %s) ->> 'version')::int",
               (name, value))


def use(shell: Shell, *names: str) -> None:
    one(shell.conn, "SELECT shell_api.set_session_secrets(%s, %s)", (shell.session_id, list(names)))


def where_stored(db: str, needle: str) -> dict[str, int]:
    """Every table of the shell schema whose rows, as text, hold ``needle``."""
    admin = connect_as(db, "postgres")
    try:
        tables = [r["relname"] for r in call(
            admin, "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                   "WHERE n.nspname = 'shell' AND c.relkind IN ('r', 'p')")]
        found = {}
        for table in tables:
            count = one(admin, f"SELECT count(*) FROM shell.{table} x "
                               "WHERE strpos(x::text, %s) > 0", (needle,))
            if count:
                found[table] = count
        return found
    finally:
        admin.close()


def hex_of(value: str) -> str:
    return value.encode().hex()


@pytest.fixture
def token() -> str:
    return "tok-" + secrets.token_hex(12)


def test_a_secret_is_used_and_its_value_is_stored_nowhere(db, daemon, shell, make_shell, token,
                                                           tmp_path):
    assert set_secret(shell, "API_TOKEN", token) == 1
    use(shell, "API_TOKEN")
    printed = shell.run('echo "token=$API_TOKEN"')
    assert (printed["status"], printed["output"]) == ("done", "token=***\n"), printed
    # Printed in two pieces a second apart: what came before the value is
    # stored at once, its first half is held back until the second tells.
    split = shell.run('printf "before %s" "${API_TOKEN:0:9}"; sleep 1; printf "%s\\n" '
                      '"${API_TOKEN:9}"; echo after')
    assert split["output"] == "before ***\nafter\n", split
    assert call(shell.conn, "SELECT count(*) AS n FROM shell.output_chunks WHERE command_id = %s",
                (split["id"],))[0]["n"] >= 2
    exported = shell.run('mkdir -p "d-$API_TOKEN"; export COPY="$API_TOKEN" API_TOKEN=changed; '
                         'echo "$API_TOKEN" > file.txt; echo "$COPY" | wc -c')
    assert exported["output"] == f"{len(token) + 1}\n"
    assert exported["env_after"]["COPY"] == "***" and "API_TOKEN" not in exported["env_after"]
    moved = shell.run('cd "d-$API_TOKEN" && pwd')
    assert moved["output"] == "/home/sandbox/d-***\n"
    assert moved["cwd_after"] == "/home/sandbox/d-***"
    # The next command gets the secret again, as set: the export did not
    # stick. The directory kept is the masked one, which does not exist.
    again = shell.run('echo "${#API_TOKEN} ${API_TOKEN:0:4}"; cat ~/file.txt')
    assert again["output"] == ("pg-shell: /home/sandbox/d-*** is gone; starting in /home/sandbox\n"
                               f"{len(token)} tok-\nchanged\n"), again
    # Its record names the secret and its version.
    record = json.loads(again["result_record"])
    assert (record["v"], record["secrets"]) == (RECORD_VERSION,
                                                [{"name": "API_TOKEN", "version": 1}])

    # A fork and a replay use the secret by name, and mask it too.
    fork = make_shell("alice")
    fork.session_id = one(shell.conn, "SELECT shell_api.fork_session(%s)", (printed["id"],))
    assert fork.run('echo "$API_TOKEN"')["output"] == "***\n"
    replay = make_shell("alice")
    replay.session_id = one(shell.conn, "SELECT shell_api.replay_session(%s, %s)",
                            (shell.session_id, printed["id"]))
    replayed = [replay.wait(r["id"]) for r in call(
        replay.conn, "SELECT id FROM shell.commands WHERE session_id = %s ORDER BY id",
        (replay.session_id,))]
    assert replayed[0]["output"] == "token=***\n" and all(r["status"] == "done" for r in replayed)

    # Nowhere but in the name of the directory the command made: the files,
    # their names and contents, are the user's data, kept as the command left
    # them. Not in any other table, as text or as bytes; not in the export,
    # not in the executor's log; and the history verifies.
    assert where_stored(db, token).keys() == {"tree_entries"}
    assert where_stored(db, hex_of(token)) == {}
    export = cli(db, "audit", "export")
    assert export.returncode == 0, export.stderr
    assert token not in export.stdout and '"API_TOKEN"' in export.stdout
    assert token not in daemon.log()
    code, report = verify(db)
    assert code == 0 and report["breaks"] == [], report


def test_a_file_written_with_a_secret_holds_it_as_written(db, daemon, shell, token):
    set_secret(shell, "API_TOKEN", token)
    use(shell, "API_TOKEN")
    shell.run('echo "$API_TOKEN" > secret.txt')
    held = bytes(one(shell.conn, "SELECT shell_api.read_file(%s, 'secret.txt', NULL)",
                     (shell.session_id,)))
    assert held == (token + "\n").encode()
    # Shown as a file's content, it is the user's data: not masked.
    assert where_stored(db, hex_of(token)).keys() <= {"blob_chunks", "blobs"}


def test_a_deleted_secret_fails_the_next_command_saying_so(db, daemon, shell, token):
    set_secret(shell, "API_TOKEN", token)
    use(shell, "API_TOKEN")
    one(shell.conn, "SELECT shell_api.delete_secret('API_TOKEN')")
    row = shell.run("echo never")
    assert row["status"] == "failed" and "never" not in row["output"]
    assert row["reason"].startswith("secret API_TOKEN is not set"), row["reason"]


def test_an_executor_without_the_key_refuses_commands_that_need_secrets(
        db, make_daemon, shell, make_shell, token, tmp_path):
    first = make_daemon().start()
    set_secret(shell, "API_TOKEN", token)
    first.stop()
    keyless = make_daemon(PG_SHELL_SECRETS_KEY_FILE="").start()
    use(shell, "API_TOKEN")
    refused = shell.run("echo never")
    assert refused["status"] == "failed", refused
    assert "this executor holds no key to open them" in refused["reason"], refused["reason"]
    plain = make_shell("alice")  # a session of hers that names no secret
    assert plain.run("echo fine")["output"] == "fine\n"
    keyless.stop()
    # No key file, while the database holds secrets: made anew here, it
    # would not open them; the executor says to copy the key instead.
    missing = make_daemon(PG_SHELL_SECRETS_KEY_FILE=str(tmp_path / "absent-key")).launch()
    assert missing.wait(60) != 0
    assert "copy that key's file here" in missing.log(), missing.log()[-2000:]
    SecretsKey.from_file(tmp_path / "another-key")  # a key of its own, made by hand
    other = make_daemon(PG_SHELL_SECRETS_KEY_FILE=str(tmp_path / "another-key")).start()
    wrong = shell.run("echo never")
    assert "which this executor does not hold" in wrong["reason"], wrong["reason"]
    other.stop()


def test_on_a_terminal_a_value_of_several_lines_is_masked(db, daemon, shell):
    pem = "-----BEGIN KEY-----\n" + secrets.token_hex(24) + "\n-----END KEY-----"
    set_secret(shell, "DEPLOY_KEY", pem)
    use(shell, "DEPLOY_KEY")
    command_id = one(shell.conn, "SELECT shell_api.submit_command(%s, %s, true)",
                     (shell.session_id, 'printf "%s\\n" "$DEPLOY_KEY"; echo "$DEPLOY_KEY" | wc -l'))
    row = shell.wait(command_id)
    assert row["output"] == "***\r\n3\r\n", row["output"]


def test_a_variable_named_after_a_value_is_not_kept(db, daemon, shell):
    set_secret(shell, "NAME_TOKEN", "secret_name_1234")
    use(shell, "NAME_TOKEN")
    row = shell.run('export "$NAME_TOKEN"=1 KEPT=2')
    assert row["env_after"].get("KEPT") == "2" and "secret_name_1234" not in row["env_after"]


def test_a_changed_secret_version_in_a_row_is_an_edit(db, daemon, shell, token):
    set_secret(shell, "API_TOKEN", token)
    use(shell, "API_TOKEN")
    row = shell.run("true")
    admin = connect_as(db, "postgres")
    try:
        with admin.cursor() as cur:
            cur.execute("UPDATE shell.commands SET secrets = '[{\"name\": \"API_TOKEN\", "
                        "\"version\": 2}]' WHERE id = %s", (row["id"],))
        admin.commit()
    finally:
        admin.close()
    code, report = verify(db)
    assert code == 1 and [b["field"] for b in report["breaks"]] == ["secrets"], report
