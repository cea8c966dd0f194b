"""What a user of the shell sees: real shell syntax, state that persists,
exit codes, ordering, and output that streams."""

from __future__ import annotations


def test_pipes_globs_redirects_and_variables_work(daemon, shell):
    row = shell.run("echo hello | tr a-z A-Z && touch a1 a2 && echo a* > list && X=42; cat list; "
                    "echo $X")
    assert (row["status"], row["exit_code"], row["reason"]) == ("done", 0, None)
    assert row["output"] == "HELLO\na1 a2\n42\n"
    assert row["image_digest"].startswith("sha256:")
    assert row["worker_id"] == daemon.env["PG_SHELL_WORKER_ID"]
    assert row["started_at"] <= row["completed_at"] and row["duration_ms"] >= 0


def test_cd_export_and_unset_persist_to_the_next_command(daemon, shell):
    shell.run("mkdir -p work/deep && cd work/deep && export GREETING='hi there' KEEP=1 GONE=x")
    shell.run("unset GONE")
    row = shell.run('pwd; echo "$GREETING|$KEEP|${GONE-unset}"')
    assert row["output"] == "/home/sandbox/work/deep\nhi there|1|unset\n"
    assert row["cwd_before"] == "/home/sandbox/work/deep"
    env = row["env_after"]
    assert (env["GREETING"], env["KEEP"], "GONE" in env) == ("hi there", "1", False)


def test_exit_codes_are_recorded(daemon, shell):
    assert shell.run("exit 3")["exit_code"] == 3
    assert shell.run("false")["exit_code"] == 1
    row = shell.run("cd /tmp; exit 7")
    assert (row["status"], row["exit_code"], row["cwd_after"]) == ("done", 7, "/home/sandbox")
    # Ending outside the home fails a command that would have succeeded.
    assert shell.run("cd /tmp")["exit_code"] == 1
    assert shell.run("cd /tmp; cd ~")["exit_code"] == 0


def test_commands_of_a_session_run_in_order_while_sessions_run_concurrently(daemon, make_shell):
    a, b = make_shell("alice"), make_shell("bob")
    a_ids = [a.submit(f"echo {i} >> order; sleep 0.2") for i in range(4)]
    b_ids = [b.submit(f"echo {i} >> order; sleep 0.2") for i in range(4)]
    for cid in a_ids:
        a.wait(cid)
    for cid in b_ids:
        b.wait(cid)
    assert a.run("cat order")["output"] == "0\n1\n2\n3\n"
    assert b.run("cat order")["output"] == "0\n1\n2\n3\n"
    a_rows = [a.command(i) for i in a_ids]
    b_rows = [b.command(i) for i in b_ids]
    # Each session's commands never overlap ...
    for rows in (a_rows, b_rows):
        for first, second in zip(rows, rows[1:]):
            assert first["completed_at"] <= second["started_at"]
    # ... while the two sessions overlapped in time.
    assert a_rows[0]["started_at"] < b_rows[-1]["completed_at"]
    assert b_rows[0]["started_at"] < a_rows[-1]["completed_at"]


def test_output_is_visible_before_the_command_ends(daemon, shell):
    cid = shell.submit("echo first; sleep 3; echo second")
    row = shell.wait(cid, until=lambda r: r["status"] == "running" and r["output_bytes"] > 0)
    output = "".join(chunk for chunk in _chunks(shell, cid))
    assert output == "first\n"
    assert shell.command(cid)["status"] == "running"
    assert shell.wait(cid)["output"] == "first\nsecond\n"
    del row


def _chunks(shell, cid):
    from tests.support import call

    return [r["data"] for r in call(shell.conn, "SELECT data FROM shell.output_chunks WHERE "
                                                "command_id = %s ORDER BY seq", (cid,))]


def test_binary_and_invalid_utf8_output_is_replaced_not_fatal(daemon, shell):
    row = shell.run("printf 'ok \\377\\376 end\\n'; head -c 4096 /dev/urandom")
    assert row["status"] == "done" and row["exit_code"] == 0
    assert row["output"].startswith("ok \ufffd\ufffd end\n")


def test_output_over_the_cap_is_truncated_with_a_marker(make_daemon, shell):
    make_daemon(PG_SHELL_OUTPUT_CAP_BYTES="4096").start()
    row = shell.run("yes abcdefg | head -c 100000; echo; echo done-anyway >&2")
    assert row["status"] == "done" and row["truncated"] is True
    assert "output truncated" in row["output"]
    assert len(row["output"].encode()) < 4096 + 200


def test_a_timed_out_command_keeps_its_partial_output_and_the_files_it_wrote(make_daemon, shell):
    make_daemon(PG_SHELL_TIMEOUT_S="2").start()
    row = shell.run("echo partial; echo kept > partial.txt; cd /tmp; sleep 60")
    assert (row["status"], row["exit_code"], row["reason"]) == ("failed", 124, "timeout")
    assert row["output"] == ("partial\n\n[pg-shell: timed out, so its cd and export did not "
                             "take effect]\n")
    after = shell.run("pwd; cat partial.txt")
    assert after["output"] == "/home/sandbox\nkept\n"


def test_out_of_memory_is_reported_as_oom(make_daemon, shell):
    make_daemon(PG_SHELL_MEMORY_MB="64").start()
    row = shell.run("python3 -c 'b = bytearray(512 * 1024 * 1024); print(len(b))'")
    assert (row["status"], row["exit_code"], row["reason"]) == ("failed", 137, "oom")


def test_cancel_stops_a_running_command_and_keeps_the_files_it_wrote(daemon, shell):
    cid = shell.submit("echo started; echo kept > partial.txt; (sleep 600; echo late > late.txt) & "
                       "sleep 60")
    shell.wait(cid, until=lambda r: r["output_bytes"] > 0)
    assert shell.cancel(cid) is True
    row = shell.wait(cid, timeout=30)  # a liveness bound: the command would run a minute
    assert (row["status"], row["reason"]) == ("cancelled", "cancelled")
    assert row["output"].startswith("started\n")
    # What it wrote is kept; what it left running was ended with it.
    assert shell.run("cat partial.txt; ls")["output"] == "kept\npartial.txt\n"


def test_cancel_of_a_pending_command_means_it_never_runs(daemon, shell):
    first = shell.submit("sleep 2")
    second = shell.submit("touch should-not-exist")
    assert shell.cancel(second) is True
    shell.wait(first)
    assert shell.command(second)["status"] == "cancelled"
    assert shell.run("ls -A")["output"] == ""


def test_an_executor_without_a_configured_worker_id_runs_commands(make_daemon, shell):
    """Unset, the id is generated once per process: the claim loop and each
    command's life must use the same one, or every lease looks lost."""
    daemon = make_daemon()
    del daemon.env["PG_SHELL_WORKER_ID"]
    daemon.start()
    for _ in range(2):  # the second one finds its warm container
        row = shell.run("echo hi")
        assert (row["status"], row["output"]) == ("done", "hi\n")

