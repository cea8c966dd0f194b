"""A session's files live in PostgreSQL: captured after each command, restored
on any host, forked and replayed with the session (DESIGN.md §9). Through
the real daemon and the SQL API."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.fixtures_stack import free_port, remove_session_volumes
from tests.observability.test_metrics import scrape, value
from tests.support import call, one

ROOT = "/home/sandbox"


@pytest.fixture
def daemon(make_daemon):
    # A short time limit: one test needs a command that never commits.
    return make_daemon(PG_SHELL_TIMEOUT_S="3").start()


def files(shell, command_id: int | None = None) -> dict[str, dict]:
    rows = call(shell.conn, "SELECT * FROM shell_api.session_files(%s, %s)",
                (shell.session_id, command_id))
    return {r["path"]: r for r in rows}


def read(shell, path: str, command_id: int | None = None) -> bytes:
    return bytes(one(shell.conn, "SELECT shell_api.read_file(%s, %s, %s)",
                     (shell.session_id, path, command_id)))


def changes(shell, command_id: int) -> set[tuple[str, str]]:
    rows = call(shell.conn, "SELECT * FROM shell_api.command_changes(%s)", (command_id,))
    return {(r["path"], r["change"]) for r in rows}


def test_files_directories_symlinks_and_modes_are_stored(daemon, shell):
    row = shell.run("mkdir -p src/empty && printf 'print(1)\\n' > src/main.py"
                    " && chmod 750 src/main.py"
                    " && ln -s src/main.py link && ln -s /etc/passwd outside && printf '' > empty")
    assert row["status"] == "done", row["output"]
    stored = files(shell)
    assert stored["src"]["kind"] == "dir" and stored["src/empty"]["kind"] == "dir"
    assert (stored["src/main.py"]["kind"], stored["src/main.py"]["mode"],
            stored["src/main.py"]["size"]) == ("file", 0o750, 9)
    assert (stored["link"]["kind"], stored["link"]["target"]) == ("symlink", "src/main.py")
    assert stored["outside"]["target"] == "/etc/passwd"  # a link is stored, never followed
    assert stored["empty"]["size"] == 0
    assert read(shell, "src/main.py") == b"print(1)\n"
    assert read(shell, "empty") == b""
    assert row["root_after"] != row["root_before"]
    assert one(shell.conn, "SELECT root FROM shell.sessions WHERE id = %s",
               (shell.session_id,)) == row["root_after"]


def test_entries_their_owner_cannot_read_or_write_are_captured_with_their_modes(daemon, shell):
    row = shell.run("mkdir -p locked/inner && echo secret > locked/inner/f"
                    " && echo hidden > unreadable"
                    " && chmod 000 unreadable locked/inner/f && chmod 500 locked/inner"
                    " && chmod 000 locked")
    assert row["status"] == "done", row["output"]
    stored = files(shell)
    assert [stored[p]["mode"] for p in ("locked", "locked/inner", "locked/inner/f",
                                        "unreadable")] == [0, 0o500, 0, 0]
    assert read(shell, "locked/inner/f") == b"secret\n"
    assert read(shell, "unreadable") == b"hidden\n"
    row = shell.run("stat -c %a locked unreadable; chmod 700 locked;"
                    " cat locked/inner/f 2>&1; echo $?")
    assert row["output"] == "0\n0\ncat: locked/inner/f: Permission denied\n1\n", row["output"]


def test_deletions_renames_and_odd_names_are_captured(daemon, shell):
    shell.run("mkdir -p a/b && echo 1 > a/b/one && echo 2 > two && echo 3 > 'with space'"
              " && echo 4 > \"$(printf 'new\\nline')\"")
    row = shell.run("mv a renamed && rm two && mv 'with space' 'still with space'")
    assert row["status"] == "done", row["output"]
    stored = files(shell)
    assert "a" not in stored and "two" not in stored and "with space" not in stored
    assert read(shell, "renamed/b/one") == b"1\n"
    assert read(shell, "still with space") == b"3\n"
    assert read(shell, "new\nline") == b"4\n"
    assert {("a", "deleted"), ("a/b/one", "deleted"), ("renamed", "added"),
            ("renamed/b/one", "added"),
            ("two", "deleted"), ("still with space", "added")} <= changes(shell, row["id"])


def test_a_command_that_changes_nothing_keeps_the_root(daemon, shell):
    first = shell.run("echo data > f")
    row = shell.run("cat f")
    assert row["root_before"] == row["root_after"] == first["root_after"]
    assert changes(shell, row["id"]) == set()


def test_fork_starts_with_the_files_right_after_its_command(daemon, shell, make_shell):
    made = shell.run("mkdir w && cd w && echo v1 > f")
    shell.run("echo v2 > f && touch later")
    fork_id = one(shell.conn, "SELECT shell_api.fork_session(%s)", (made["id"],))
    fork = make_shell("alice")
    fork.session_id = fork_id
    row = fork.run("pwd; cat f; ls")
    assert row["output"] == f"{ROOT}/w\nv1\nf\n", row["output"]


def test_replay_from_the_middle_starts_from_the_files_its_command_started_from(daemon, shell,
                                                                              make_shell):
    shell.run("mkdir d && cd d && echo start > log")
    second = shell.run("echo more >> log && cat log")
    shell.run("echo end >> log")
    replay_id = one(shell.conn, "SELECT shell_api.replay_session(%s, %s)",
                    (shell.session_id, second["id"]))
    replay = make_shell("alice")
    replay.session_id = replay_id
    ids = [r["id"] for r in call(replay.conn,
                                 "SELECT id FROM shell.commands WHERE session_id = %s ORDER BY id",
                                 (replay_id,))]
    rows = [replay.wait(i) for i in ids]
    assert rows[0]["output"] == second["output"] == "start\nmore\n"
    assert read(replay, "d/log") == b"start\nmore\nend\n"


def test_a_host_whose_copy_is_gone_restores_the_session(daemon, shell, docker_client):
    shell.run("mkdir -p x/y && echo kept > x/y/f && ln -s x/y/f l && chmod 700 x")
    # This host loses its copy (a new host, or a disk replaced): volume and index.
    daemon.stop()
    volumes_dir = daemon.env["PG_SHELL_VOLUMES_DIR"]
    remove_session_volumes(docker_client, volumes_dir)
    daemon.start()
    row = shell.run("cat x/y/f; readlink l; stat -c %a x")
    assert row["output"] == "kept\nx/y/f\n700\n", row["output"]


def test_a_copy_changed_behind_the_database_is_not_trusted(make_daemon, shell):
    make_daemon(PG_SHELL_CAPTURE_MAX_ENTRIES="50").start()
    shell.run("echo committed > f")
    # A command whose files are not saved (its home past the entries cap)
    # changed the copy; the next command must see the committed files.
    row = shell.run("echo uncommitted > f; mkdir many && (cd many && touch $(seq 1 100))")
    assert row["status"] == "failed" and "files not saved" in row["output"], row
    assert shell.run("cat f; ls")["output"] == "committed\nf\n"


# Prints the home as the container sees it: path -> [kind, mode, size, sha256, target].
SEEN_PY = """
import hashlib, json, os, stat
seen = {}
for top, dirs, names in os.walk("."):
    for name in dirs + names:
        p = os.path.join(top, name)[2:]
        st = os.lstat(p)
        kind = {stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink"}.get(stat.S_IFMT(st.st_mode), "file")
        data = open(p, "rb").read() if kind == "file" else None
        seen[p] = [kind, stat.S_IMODE(st.st_mode), len(data) if data is not None else 0,
                   hashlib.sha256(data).hexdigest() if data is not None else None,
                   os.readlink(p) if kind == "symlink" else None]
print(json.dumps(seen))
"""
SEEN = f"cd ~ && python3 -c {shlex.quote(SEEN_PY)}"

# One kind of change each, deep in a tree of several directories.
CHANGES = [
    "mkdir -p a/b/c d e/f && echo 1 > a/b/c/one && echo 2 > a/b/two && echo ab > a/same-size"
    " && echo 3 > d/three && echo 4 > e/f/four && ln -s a/b link",
    "echo more >> a/b/c/one",                      # a file rewritten, deep
    "ln a/b/c/one hard",                           # a hard link
    "echo through-the-link >> hard",               # its file changed under the other name
    "printf 'xy\\n' > a/same-size",                # same size, new bytes
    "rm a/b/two",                                  # a deletion
    "mv d renamed",                                # a directory renamed
    "rm -r e && echo now-a-file > e",              # a directory replaced by a file
    "rm e && mkdir -p e/g && echo back > e/g/x",   # and back
    "python3 -c \"import mmap; f = open('renamed/three', 'r+b'); "
    "m = mmap.mmap(f.fileno(), 0); f.close(); m[0:1] = b'Z'; m.flush()\"",  # written mapped
    "touch \"a/b/$(printf 'new\\nline')\"",          # a name with a newline
    "chmod 600 a/b/c/one && chmod 700 a/b",        # modes only
    "ln -sfn renamed link",                        # a link pointed elsewhere
    "mkdir -p a/b/c/x/y/z",                        # empty directories, deep
    "true",                                        # nothing
    "rm -r a",                                     # a whole subtree
]


def stored_as_seen(shell, command_id: int) -> dict[str, list]:
    return {p: [r["kind"], r["mode"], r["size"] if r["kind"] == "file" else 0, r["sha256"],
                r["target"]] for p, r in files(shell, command_id).items()}


@pytest.mark.parametrize("records", ["true", "false"])
def test_every_kind_of_change_is_stored_as_the_container_sees_it(make_daemon, shell,
                                                                 docker_client, records):
    """The capture reads only the directories that changed, as the kernel's
    change record names them or (without one) as a walk of the home finds
    them, and the files that changed where the host mounts the copy or
    (without a record) as the supervisor sends them; after each kind of
    change the stored files are what a full walk of the home finds, with
    this host's index and after the host lost its copy and restored it."""
    port = free_port()
    daemon = make_daemon(PG_SHELL_CAPTURE_CHANGE_RECORDS=records,
                         PG_SHELL_METRICS_PORT=str(port)).start()
    targeted = 0.0
    read_via = {"host": 0.0, "sandbox": 0.0}

    def scanned_changed() -> float:
        scans = scrape(f"http://127.0.0.1:{port}/metrics")
        for via in read_via:
            read_via[via] += value(scans, "pg_shell_capture_files_total", via=via)
        return value(scans, "pg_shell_capture_scans_total", walk="changed")

    for at, change in enumerate(CHANGES):
        if at == len(CHANGES) // 2:  # the rest starts from a restored copy
            targeted += scanned_changed()
            daemon.stop()
            volumes_dir = daemon.env["PG_SHELL_VOLUMES_DIR"]
            remove_session_volumes(docker_client, volumes_dir)
            daemon.start()
        row = shell.run(f"{change} && {SEEN}")
        assert row["status"] == "done", (change, row["output"])
        assert stored_as_seen(shell, row["id"]) == json.loads(row["output"]), change
    targeted += scanned_changed()
    # With a record (runc), changed files are read where the host mounts
    # the copy; without one, the supervisor sends them.
    assert read_via["host" if records == "true" else "sandbox"] > 0
    assert read_via["sandbox" if records == "true" else "host"] == 0
    if records == "false":
        assert targeted == 0
    else:
        # The home is walked by the session's first command here, and by
        # those in which a file with two names changed (ln, and the write
        # through the link); after the restore the record starts from the
        # restore's own scan.
        assert targeted == len(CHANGES) - 3


def test_a_directory_changed_alone_is_looked_at_with_its_parent_not_walked(make_daemon, shell):
    """A command that changes a directory changes its ctime in its parent's
    listing, which that capture does not look at: the next capture that
    lists the parent looks at that directory again instead of taking it for
    another one put in its place and walking everything below it."""
    port = free_port()
    make_daemon(PG_SHELL_CAPTURE_CHANGE_RECORDS="true", PG_SHELL_METRICS_PORT=str(port)).start()

    def listed() -> float:
        return value(scrape(f"http://127.0.0.1:{port}/metrics"),
                     "pg_shell_capture_directories_listed_total")

    for command in ("mkdir -p a/b/{1..30} && touch a/b/{1..30}/f", "touch a/b/x"):
        assert shell.run(command)["status"] == "done"
    before = listed()
    row = shell.run("touch a/y")
    assert row["status"] == "done" and "a/y" in files(shell, row["id"])
    # a, which the record names; a/b is as the index holds it, and none of a/b/1..30 is listed.
    assert listed() - before == 1

def test_upload_is_seen_by_the_next_command_and_history_orders_it(daemon, shell):
    shell.run("echo before")
    upload_id = one(shell.conn, "SELECT shell_api.upload_file(%s, 'in/data.txt', %s, 384)",
                    (shell.session_id, b"uploaded\n"))
    row = shell.run("cat in/data.txt; stat -c %a in/data.txt")
    assert row["output"] == "uploaded\n600\n"
    assert upload_id < row["id"]
    assert changes(shell, upload_id) == {("in", "added"), ("in/data.txt", "added")}
