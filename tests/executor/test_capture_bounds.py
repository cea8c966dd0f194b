"""A capture is bounded (executor/workspace/capture.py, the supervisor's
scan): what a tenant's command leaves in its home cannot make the capture
break the protocol, hold unbounded entries or bytes, cost a database call
per file, reveal other tenants' contents, or silently drop files. Through
the real daemon, a tenant's commands and the tenant's own listing calls."""

from __future__ import annotations

import hashlib
import io
import secrets

import pytest

from tests.db.claim_support import superuser
from tests.support import call, one


def listed(shell) -> list[str]:
    """Every path of the session's files, read a page at a time."""
    paths: list[str] = []
    after = None
    while page := call(shell.conn, "SELECT path FROM shell_api.session_files(%s, NULL, %s, 1000)",
                       (shell.session_id, after)):
        paths += [r["path"] for r in page]
        after = paths[-1]
    return paths


def python(script: str) -> str:
    return "python3 - <<'EOF'\n" + script + "\nEOF"


@pytest.fixture
def daemon(make_daemon):
    return make_daemon(PG_SHELL_CAPTURE_MAX_ENTRIES="400", PG_SHELL_CAPTURE_MAX_MB="2").start()


def test_paths_of_control_characters_are_captured_whole(make_daemon, shell):
    # JSON escapes each control character in six bytes: 2,000 entries of
    # ~1,000 such characters made one manifest frame of ~12 MB, over the
    # protocol's 8 MiB, and the files were not saved.
    make_daemon().start()
    made = shell.run(python(
        "import os\n"
        "d = os.path.join(*['\\x01' * 250] * 3)\n"
        "os.makedirs(d)\n"
        "for i in range(2000):\n"
        "    open(os.path.join(d, '\\x02' * 240 + '%05d' % i), 'w').close()\n"))
    assert made["status"] == "done" and "not saved" not in made["output"], made["output"]
    paths = listed(shell)
    assert len(paths) == 3 + 2000
    assert all(set(p.replace("/", "")) <= set("\x01\x02" + "0123456789") for p in paths)


def test_a_home_past_the_entries_cap_fails_its_command_and_keeps_its_files(daemon, shell):
    assert shell.run("mkdir keep && touch keep/a keep/b")["status"] == "done"
    before = listed(shell)
    row = shell.run("mkdir many && (cd many && touch $(seq 1 500)) && echo made")
    assert row["status"] == "failed" and row["exit_code"] == 0, row
    assert "more than 400 entries" in row["reason"], row["reason"]
    assert "made\n" in row["output"]
    assert listed(shell) == before == ["keep", "keep/a", "keep/b"]
    # The next command starts from the files as they were.
    assert shell.run("ls")["output"] == "keep\n"


def test_changes_past_the_bytes_cap_fail_their_command_and_keep_the_files(daemon, shell):
    assert shell.run("echo small > small")["status"] == "done"
    row = shell.run("head -c 3000000 /dev/zero > big")
    assert row["status"] == "failed", row
    assert "more than the 2097152 one command may change" in row["reason"], row["reason"]
    assert listed(shell) == ["small"]
    assert shell.run("ls")["output"] == "small\n"


def test_files_below_a_path_longer_than_path_max_fail_the_command(daemon, shell):
    # A path of 20 x 250 bytes is longer than the kernel resolves: the scan
    # could not list the directory, skipped it and saved the rest, so the
    # file at the bottom was lost at the next restore.
    assert shell.run("echo kept > kept")["status"] == "done"
    row = shell.run(python(
        "import os\n"
        "for _ in range(20):\n"
        "    os.mkdir('d' * 250)\n"
        "    os.chdir('d' * 250)\n"
        "open('deep', 'w').write('hidden')\n"))
    assert row["status"] == "failed", row
    assert "longer than 4096 bytes" in row["reason"], row["reason"]
    assert listed(shell) == ["kept"]


def test_a_home_its_command_made_unreadable_is_still_captured(daemon, shell):
    row = shell.run("echo x > f && chmod 000 ~")
    assert row["status"] == "done", row
    assert listed(shell) == ["f"]
    # The home keeps the mode its command gave it (the next shell cannot enter it).
    out = shell.run("stat -c %a ~ && chmod 700 ~ && cat ~/f")["output"]
    assert "\n0\nx\n" in out, out


@pytest.fixture
def stored_chunks(db):
    """A record of every chunk a statement offered to shell.blob_chunks (a
    duplicate too: a BEFORE trigger runs before ON CONFLICT skips it), and
    of every INSERT statement on it."""
    su = superuser(db)
    su.cursor().execute("""
        CREATE TABLE public.offered (sha256 text, statement bigint);
        CREATE SEQUENCE public.statements;
        CREATE FUNCTION public.offer() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
        BEGIN
            INSERT INTO public.offered VALUES (NEW.sha256, currval('public.statements'));
            RETURN NEW;
        END $$;
        CREATE FUNCTION public.statement() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
        BEGIN
            PERFORM nextval('public.statements');
            RETURN NULL;
        END $$;
        CREATE TRIGGER offered BEFORE INSERT ON shell.blob_chunks
            FOR EACH ROW EXECUTE FUNCTION public.offer();
        CREATE TRIGGER statements BEFORE INSERT ON shell.blob_chunks
            FOR EACH STATEMENT EXECUTE FUNCTION public.statement();
    """)
    return su


def test_small_files_are_stored_a_batch_per_call(daemon, shell, stored_chunks):
    row = shell.run("mkdir small && cd small && for i in $(seq 1 300); do echo $i > $i; done")
    assert row["status"] == "done", row["output"]
    offered = call(stored_chunks, "SELECT sha256, statement FROM public.offered")
    assert {r["sha256"] for r in offered} == {
        hashlib.sha256(f"{i}\n".encode()).hexdigest() for i in range(1, 301)}
    # One INSERT for all of them (a call per file, and a question before
    # each, made 600 calls).
    assert len({r["statement"] for r in offered}) == 1


def test_a_capture_sends_bytes_another_tenant_already_stores(daemon, make_shell, stored_chunks):
    # Whether a content is stored already must not change what a tenant's
    # capture does (a skipped upload is a faster command: a timing oracle).
    bob, alice = make_shell("bob"), make_shell("alice")
    secret = b"bob's secret: 4242\n"
    one(bob.conn, "SELECT shell_api.upload_file(%s, 'secret', %s)", (bob.session_id, secret))
    call(stored_chunks, "DELETE FROM public.offered")
    row = alice.run("printf \"bob's secret: 4242\\n\" > guess; printf 'nobody has this\\n' > other")
    assert row["status"] == "done", row["output"]
    offered = {r["sha256"] for r in call(stored_chunks, "SELECT sha256 FROM public.offered")}
    assert offered == {hashlib.sha256(secret).hexdigest(),
                       hashlib.sha256(b"nobody has this\n").hexdigest()}


# A sandbox whose supervisor answers a restore with a frame header the protocol
# refuses (as it refused a manifest batch over 8 MiB).
BROKEN_RESTORE = """\
USER root
RUN mv /opt/pg-shell/supervisor /opt/pg-shell/supervisor.real \\
 && echo '#!/bin/sh' > /opt/pg-shell/supervisor \\
 && echo 'if [ "$1" = restore ]; then printf ZZZZZ; exit 1; fi' >> /opt/pg-shell/supervisor \\
 && echo 'exec /opt/pg-shell/supervisor.real "$@"' >> /opt/pg-shell/supervisor \\
 && chmod 0555 /opt/pg-shell/supervisor
USER sandbox
"""


@pytest.fixture
def broken_restore_image(docker_client, sandbox_image):
    tag = f"pgtest-broken-restore-{secrets.token_hex(4)}:latest"
    image, _ = docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {sandbox_image}\n{BROKEN_RESTORE}".encode()), tag=tag,
        rm=True, pull=False)
    yield str(image.id)
    docker_client.images.remove(tag, force=True)


def test_a_restore_that_breaks_the_protocol_fails_its_command_once(make_daemon, shell,
                                                                   broken_restore_image):
    make_daemon(PG_SHELL_IMAGE=broken_restore_image).start()
    assert shell.run("echo a > a")["status"] == "done"  # a new copy: nothing to restore
    one(shell.conn, "SELECT shell_api.upload_file(%s, 'b', 'b')", (shell.session_id,))
    row = shell.run("cat a b")  # this host's copy is behind: it is restored first
    assert row["status"] == "failed", row
    assert "could not be restored" in row["reason"] and "broke the protocol" in row["reason"], (
        row["reason"])
    assert row["attempts"] == 1  # not handed back to be tried again
