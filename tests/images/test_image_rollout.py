"""Image rollout: `pg-shell image promote|list|prune` with the real daemon,
the real engine and the test's database. A promotion reaches a running
executor without a restart; commands already running finish on the old
image; prune never removes what a retained command may be replayed on."""

from __future__ import annotations

import json

import pytest

from tests.support import call, connect_as, one

pytestmark = [pytest.mark.postgres, pytest.mark.docker]


def current_image(db: str) -> list[dict]:
    """The base template's current image (a row, or none)."""
    conn = connect_as(db, "shell_admin")
    try:
        return call(conn, "SELECT * FROM shell.current_images() WHERE template = 'base'")
    finally:
        conn.close()


def listed(image_cli, repository: str) -> dict[str, dict]:
    done = image_cli("list", "--repository", repository, "--json")
    assert done.returncode == 0, done.stderr
    return {row["digest"]: row for row in map(json.loads, done.stdout.splitlines())}


def test_a_promotion_reaches_the_running_executor_and_running_commands_finish_on_the_old_image(
        daemon, make_shell, variants, image_cli, sandbox_image, db):
    new = variants.build("v2")
    old_session, new_session = make_shell("alice"), make_shell("bob")
    # It runs until it is sent a line on its terminal (echo off once it says
    # ready): however slow the machine, it still runs after the promotion.
    long_id = one(old_session.conn, "SELECT shell_api.submit_command(%s, %s, p_tty => true)",
                  (old_session.session_id,
                   "stty -echo -opost; echo ready; read -r _; echo finished"))
    old_session.wait(long_id, until=lambda row: row["output"] == "ready\n")

    promoted = image_cli("promote", f"{variants.repository}:v2")
    assert promoted.returncode == 0, promoted.stderr
    assert promoted.stdout.strip().startswith(f"promoted {new} ({variants.repository}:v2)")
    assert [r["digest"] for r in current_image(db)] == [new]
    daemon.wait_for_log(f"image {new} promoted", timeout=30)

    after = new_session.run("echo on the new image")
    assert (after["status"], after["output"], after["image_digest"]) == ("done",
                                                                         "on the new image\n", new)
    assert old_session.command(long_id)["status"] == "running"  # the promotion did not wait for it
    call(old_session.conn, "SELECT shell_api.send_input(%s, %s)", (long_id, "go\n"))
    before = old_session.wait(long_id)
    assert (before["status"], before["output"], before["image_digest"]) == (
        "done", "ready\nfinished\n", sandbox_image)
    # … and the session that ran on the old image moves on to the new one.
    assert old_session.run("true")["image_digest"] == new
    assert daemon.proc.poll() is None and daemon.log().count(" ready: ") == 1  # never restarted


def test_promoting_an_image_that_is_not_on_the_engine_is_refused(image_cli, db):
    missing = "sha256:" + "0" * 64
    refused = image_cli("promote", missing)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (f"pg-shell: image {missing} does not exist on this Docker "
                                      "engine: not promoted (build or load it on every "
                                      "executor's engine first)")
    assert current_image(db) == []
    malformed = image_cli("promote", "Not A Reference")
    assert malformed.returncode == 1 and "does not exist on this Docker engine" in malformed.stderr


def test_an_executor_whose_engine_lacks_the_promoted_image_logs_an_error_and_keeps_its_image(
        daemon, shell, db, sandbox_image):
    # Promoted elsewhere (another host's engine has it): recorded in the database only.
    missing = "sha256:" + "ab" * 32
    admin = connect_as(db, "shell_admin")
    one(admin, "SELECT digest FROM shell.promote_image(%s)", (missing,))
    admin.close()
    daemon.wait_for_log(f"promoted image {missing} does not exist on this engine", timeout=30)
    row = shell.run("echo still here")
    assert (row["status"], row["output"], row["image_digest"]) == ("done", "still here\n",
                                                                   sandbox_image)
    # Logged once, not every round.
    assert daemon.log().count(f"promoted image {missing} does not exist") == 1


def test_list_counts_commands_per_image_and_prune_keeps_what_a_replay_may_need(
        daemon, shell, variants, image_cli, sandbox_image, db):
    used, unused = variants.build("used"), variants.build("unused")
    assert shell.run("echo 1")["image_digest"] == sandbox_image
    assert image_cli("promote", used).returncode == 0
    daemon.wait_for_log(f"image {used} promoted", timeout=30)
    assert [shell.run(f"echo {i}")["image_digest"] for i in range(2)] == [used, used]
    assert image_cli("promote", sandbox_image).returncode == 0
    daemon.wait_for_log(f"image {sandbox_image} promoted", timeout=30)

    rows = listed(image_cli, variants.repository)
    assert set(rows) == {used, unused, sandbox_image}
    seen = {d: (r["commands"], r["current"], r["on_engine"], r["in_repository"])
            for d, r in rows.items()}
    assert seen == {
        used: (2, False, True, True),
        unused: (0, False, True, True),
        sandbox_image: (1, True, True, False),
    }
    assert rows[used]["tags"] == [f"{variants.repository}:used"] and rows[used]["promoted_at"]
    assert rows[unused]["promoted_at"] is None
    table = image_cli("list", "--repository", variants.repository)
    assert table.returncode == 0 and f"* {sandbox_image[:19]}" in table.stdout

    pruned = image_cli("prune", "--repository", variants.repository)
    assert pruned.returncode == 0, pruned.stderr
    assert sorted(pruned.stdout.splitlines()) == [
        f"kept    {used}: 2 retained commands ran on it (--force removes it)",
        f"removed {unused} ({variants.repository}:unused)",
    ]
    assert (variants.exists(used), variants.exists(unused), variants.exists(sandbox_image)) == (
        True, False, True)

    variants.wait_unused(used)
    forced = image_cli("prune", "--repository", variants.repository, "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.splitlines() == [f"removed {used} ({variants.repository}:used)"]
    assert not variants.exists(used) and variants.exists(sandbox_image)
    # The history still says what ran where; the list shows the image as gone.
    gone = listed(image_cli, variants.repository)[used]
    assert (gone["commands"], gone["on_engine"], gone["tags"]) == (2, False, [])
