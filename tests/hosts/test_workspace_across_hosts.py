"""A session's files follow it from host to host (DESIGN.md §9): two
executors on two Docker engines share only PostgreSQL. Which host runs a
command is decided here by running one executor at a time; each command's
worker_id proves where it ran, and each host's index shows which root its
copy held before the command (an older one must never be used as it is)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.executor.conftest import Shell
from tests.hosts.conftest import Host
from tests.support import call, one, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.docker]

ROOT = "/home/sandbox"
Hosts = tuple[Host, Host]
MakeShell = Callable[[str], Shell]


def run_on(host: Host, shell: Shell, command: str) -> dict[str, Any]:
    """Runs ``command`` with only ``host``'s executor running."""
    row = shell.run(command)
    assert (row["status"], row["exit_code"], row["worker_id"]) == ("done", 0, host.worker_id), (
        row, host.daemon.log()[-3000:])
    return row


def current_root(shell: Shell) -> str:
    return str(one(shell.conn, "SELECT root FROM shell.sessions WHERE id = %s",
                   (shell.session_id,)))


def read(shell: Shell, path: str) -> bytes:
    return bytes(one(shell.conn, "SELECT shell_api.read_file(%s, %s)", (shell.session_id, path)))


def files(shell: Shell) -> dict[str, tuple[str, str | None]]:
    rows = call(shell.conn, "SELECT * FROM shell_api.session_files(%s)", (shell.session_id,))
    return {r["path"]: (r["kind"], r["target"]) for r in rows}


def test_a_file_written_on_one_host_is_read_on_another_after_the_first_stopped(
        hosts: Hosts, shell: Shell) -> None:
    a, b = hosts
    a.start()
    wrote = run_on(a, shell, "mkdir -p notes && printf 'from A\\n' > notes/a.txt"
                             " && chmod 640 notes/a.txt && cd notes")
    a.stop()
    assert b.index_root(shell.session_id) is None  # B never held this session

    b.start()
    row = run_on(b, shell, "pwd; cat a.txt; stat -c %a a.txt")
    assert row["output"] == f"{ROOT}/notes\nfrom A\n640\n"
    assert row["root_before"] == row["root_after"] == wrote["root_after"] == current_root(shell)
    assert b.index_root(shell.session_id) == current_root(shell)


def test_deletions_and_symlinks_travel_and_an_older_copy_is_brought_up_to_date(
        hosts: Hosts, shell: Shell) -> None:
    a, b = hosts
    a.start()
    run_on(a, shell, "mkdir -p d/sub && echo one > d/one && echo two > two"
                     " && echo deep > d/sub/deep && ln -s d/one link && ln -s two link2")
    root_on_a = current_root(shell)
    a.stop()

    b.start()
    row = run_on(b, shell, "cat link link2 d/sub/deep")
    assert row["output"] == "one\ntwo\ndeep\n"
    changed = run_on(b, shell, "rm two && rm -r d/sub && echo three > d/three"
                               " && ln -sfn d/three link && rm link2")
    b.stop()

    # A's copy still holds the root A committed: older than the session's.
    assert a.index_root(shell.session_id) == root_on_a != changed["root_after"]
    assert changed["root_after"] == current_root(shell)
    a.start()
    row = run_on(a, shell, "ls -A . d; readlink link; cat link;"
                           " ls two d/sub link2 2>&1 | sed 's/^ls: //'")
    assert row["output"] == (".:\nd\nlink\n\nd:\none\nthree\nd/three\nthree\n"
                             "cannot access 'two': No such file or directory\n"
                             "cannot access 'd/sub': No such file or directory\n"
                             "cannot access 'link2': No such file or directory\n"), row["output"]
    assert files(shell) == {"d": ("dir", None), "d/one": ("file", None), "d/three": ("file", None),
                            "link": ("symlink", "d/three")}
    assert a.index_root(shell.session_id) == current_root(shell)


def test_a_path_that_changes_kind_on_another_host_changes_kind_on_this_one(
        hosts: Hosts, shell: Shell) -> None:
    a, b = hosts
    a.start()
    run_on(a, shell, "mkdir was-dir && echo x > was-dir/inside && echo y > was-file"
                     " && ln -s was-file was-link && echo z > was-file-2")
    a.stop()

    b.start()
    run_on(b, shell, "rm -r was-dir && echo now-a-file > was-dir && rm was-file && mkdir was-file"
                     " && echo in > was-file/in && rm was-link && echo plain > was-link"
                     " && rm was-file-2 && ln -s was-dir was-file-2")
    b.stop()

    a.start()
    row = run_on(a, shell, "stat -c '%n %F' was-dir was-file was-link was-file-2;"
                           " cat was-dir was-file/in was-link was-file-2")
    assert row["output"] == ("was-dir regular file\nwas-file directory\nwas-link regular file\n"
                             "was-file-2 symbolic link\nnow-a-file\nin\nplain\nnow-a-file\n"
                             ), row["output"]


def test_a_read_only_directory_is_brought_up_to_date_on_a_host_holding_an_older_copy(
        hosts: Hosts, shell: Shell) -> None:
    a, b = hosts
    a.start()
    run_on(a, shell, "mkdir ro && echo a > ro/a && chmod 555 ro")
    a.stop()

    b.start()
    row = run_on(b, shell, "stat -c %a ro; cat ro/a;"
                           " chmod 755 ro && echo b > ro/b && rm ro/a && chmod 555 ro")
    assert row["output"] == "555\na\n"
    b.stop()

    a.start()
    assert run_on(a, shell, "stat -c %a ro; ls ro; cat ro/b")["output"] == "555\nb\nb\n"


def test_files_and_directories_their_owner_locked_travel_with_their_modes(
        hosts: Hosts, shell: Shell) -> None:
    a, b = hosts
    a.start()
    run_on(a, shell, "echo s > secret && chmod 000 secret"
                     " && mkdir hidden && echo h > hidden/f && chmod 300 hidden")
    a.stop()

    b.start()
    row = run_on(b, shell, "stat -c '%a %n' secret hidden; chmod 700 hidden && cat hidden/f"
                           " && chmod 600 secret && cat secret && echo more > hidden/g")
    assert row["output"] == "0 secret\n300 hidden\nh\ns\n"
    b.stop()

    a.start()  # an older copy, with the modes A's command left
    row = run_on(a, shell, "stat -c '%a %n' secret hidden; cat secret hidden/f hidden/g")
    assert row["output"] == "600 secret\n700 hidden\ns\nh\nmore\n"


def test_a_host_holding_an_older_copy_never_uses_it(hosts: Hosts, shell: Shell) -> None:
    a, b = hosts
    a.start()
    run_on(a, shell, "echo v1 > f && echo keep > g")
    v1 = current_root(shell)
    a.stop()

    b.start()
    run_on(b, shell, "cat f && echo v2 > f")
    v2 = current_root(shell)
    b.stop()

    assert a.index_root(shell.session_id) == v1 != v2
    a.start()
    assert run_on(a, shell, "cat f g")["output"] == "v2\nkeep\n"
    a.stop()

    # A deletion on the other host: B's copy holds v2, still the session's root.
    assert b.index_root(shell.session_id) == v2 == current_root(shell)
    b.start()
    run_on(b, shell, "rm f")
    b.stop()

    assert a.index_root(shell.session_id) == v2 != current_root(shell)
    a.start()
    row = run_on(a, shell, "ls -A; test -e f || echo f-is-gone")
    assert row["output"] == "g\nf-is-gone\n"
    assert read(shell, "g") == b"keep\n"


def test_a_fork_runs_on_another_host_with_the_files_right_after_its_command(
        hosts: Hosts, shell: Shell, make_shell: MakeShell) -> None:
    a, b = hosts
    a.start()
    made = run_on(a, shell, "mkdir w && cd w && echo v1 > f")
    run_on(a, shell, "echo v2 > f && touch later")
    a.stop()

    fork = make_shell("alice")
    fork.session_id = one(shell.conn, "SELECT shell_api.fork_session(%s)", (made["id"],))
    b.start()
    row = run_on(b, fork, "pwd; cat f; ls; echo forked >> f")
    assert row["output"] == f"{ROOT}/w\nv1\nf\n", row["output"]
    b.stop()

    # Each session went on from its own files, on the other host each time.
    a.start()
    assert run_on(a, fork, "cat f; ls")["output"] == "v1\nforked\nf\n"
    assert run_on(a, shell, "cat f; ls")["output"] == "v2\nf\nlater\n"


def test_a_replay_from_the_middle_runs_on_another_host_from_the_files_its_command_started_from(
        hosts: Hosts, shell: Shell, make_shell: MakeShell) -> None:
    a, b = hosts
    a.start()
    run_on(a, shell, "mkdir d && cd d && echo start > log")
    second = run_on(a, shell, "echo more >> log && cat log && ln -sfn log current")
    run_on(a, shell, "echo end >> log && rm current")
    a.stop()

    replay = make_shell("alice")
    replay.session_id = one(shell.conn, "SELECT shell_api.replay_session(%s, %s)",
                            (shell.session_id, second["id"]))
    b.start()
    ids = [r["id"] for r in call(replay.conn, "SELECT id FROM shell.commands"
                                              " WHERE session_id = %s ORDER BY id",
                                 (replay.session_id,))]
    rows = [replay.wait(i) for i in ids]
    assert [(r["status"], r["worker_id"]) for r in rows] == [("done", b.worker_id)] * 2, rows
    assert rows[0]["output"] == second["output"] == "start\nmore\n"
    assert read(replay, "d/log") == b"start\nmore\nend\n"
    assert "d/current" not in files(replay)
    b.stop()

    # And back on A, which has never held the replay's files.
    a.start()
    assert run_on(a, replay, "pwd; cat log; ls")["output"] == f"{ROOT}/d\nstart\nmore\nend\nlog\n"


def test_large_files_and_odd_names_travel_intact(hosts: Hosts, shell: Shell) -> None:
    a, b = hosts
    a.start()
    # 13 MB: several blob chunks, streamed chunk by chunk into B's restore.
    wrote = run_on(a, shell, "head -c 13000000 /dev/urandom > big && : > empty"
                             " && mkdir -p 'with space/é' empty-dir/inner"
                             " && printf 'odd\\n' > 'with space/é/ü n'"
                             " && printf 'nl\\n' > \"$(printf 'new\\nline')\""
                             " && chmod 600 big && sha256sum big")
    digest = wrote["output"].split()[0]
    assert files(shell)["big"][0] == "file"
    assert one(shell.conn, "SELECT sha256 FROM shell_api.session_files(%s) WHERE path = 'big'",
               (shell.session_id,)) == digest
    a.stop()

    b.start()
    row = run_on(b, shell, "sha256sum big | cut -d' ' -f1; stat -c '%s %a' big empty;"
                           " cat 'with space/é/ü n' \"$(printf 'new\\nline')\"; find empty-dir")
    assert row["output"] == f"{digest}\n13000000 600\n0 644\nodd\nnl\nempty-dir\nempty-dir/inner\n"


def test_a_command_lost_with_its_host_leaves_the_session_at_its_last_committed_files(
        make_hosts: Callable[..., tuple[Host, Host]], shell: Shell) -> None:
    a, b = make_hosts(PG_SHELL_LEASE_S="5")
    a.start()
    committed = run_on(a, shell, "echo committed > f")["root_after"]
    lost = shell.submit("echo lost > f && touch lost-file && echo written && sleep 600")
    wait_for("the lost command's changes", lambda: "written" in (one(
        shell.conn, "SELECT shell.output_of(c) FROM shell.commands c WHERE id = %s",
        (lost,)) or ""))
    assert a.daemon.proc is not None
    # Host A is gone; its copy holds the changes of a command that never ended.
    a.daemon.proc.kill()
    a.daemon.proc.wait()

    b.start()  # B's lease expiry ends the lost command
    row = shell.wait(lost, timeout=120)
    assert (row["status"], row["reason"]) == ("failed", "executor lost"), row
    assert current_root(shell) == committed
    assert run_on(b, shell, "cat f; ls")["output"] == "committed\nf\n"
    b.stop()

    # A comes back: its copy, changed by the lost command, is never used as it is.
    a.start()
    assert run_on(a, shell, "cat f; ls")["output"] == "committed\nf\n"
