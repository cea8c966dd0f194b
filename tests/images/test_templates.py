"""Templates with the real daemon and engine: two templates built from the
project's files (tests/images/templates/tools and hello: the tools_image
and hello_image fixtures), registered and granted with the CLI; sessions
on each run on its image and hold the sandbox's promises there, a new
session's warm container starts on its image, and a replay keeps the image
its original ran on after a rollout. A template no host has an image for
is reported, and an image that breaks the image contract is not promoted."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures_stack import REPO
from tests.images.conftest import Variants
from tests.support import call, connect_as, one, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.docker]

@pytest.fixture
def pg_shell(db: str, sandbox_image: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """An administrator's `pg-shell ARGS` against the test's database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG_SHELL_")}
    env.update({"DATABASE_URL": db, "PG_SHELL_IMAGE": sandbox_image})

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "executor.cli.main", *args], env=env,
                              cwd=REPO, capture_output=True, text=True, timeout=120)

    return run


def offer(pg_shell: Callable[..., Any], template: str, image: str, username: str) -> None:
    """Defines the template, promotes its image, grants it to ``username``."""
    defined = pg_shell("image", "template", template, "--description", "a test template")
    assert defined.stdout == f"template {template}: for users granted it; a test template\n", (
        defined)
    promoted = pg_shell("image", "promote", "--template", template, image)
    assert promoted.returncode == 0, promoted.stderr
    assert promoted.stdout.startswith(f"promoted {image} (") and (
        f"for template {template}" in promoted.stdout)
    granted = pg_shell("user", "templates", username, template)
    assert granted.stdout == f"{username} may use the open templates and {template}\n", granted


# Each template's own program: a command that works only on its image.
OWN_PROGRAM = {
    "tools": ("bc", "echo 'scale=2; 1/4' | bc", ".25\n"),
    "hello": ("hello", "hello you", "hello from the hello template, you\n"),
}


@pytest.mark.parametrize("template", sorted(OWN_PROGRAM))
def test_a_session_on_a_template_runs_on_its_image_and_keeps_the_sandbox_promises(
        daemon, make_shell, pg_shell, sandbox_image, request, template):
    image = request.getfixturevalue(f"{template}_image")
    program, command, output = OWN_PROGRAM[template]
    on_base = make_shell("alice")
    offer(pg_shell, template, image, "alice")
    daemon.wait_for_log(f"template {template}: image {image} promoted", timeout=30)
    on_template = make_shell("alice", template)

    row = on_template.run(f"cat /etc/pg-shell-template; {command}")
    assert (row["status"], row["output"], row["image_digest"]) == (
        "done", f"{template}\n{output}", image), row
    row = on_base.run(f"command -v {program} || echo no {program}")
    assert (row["output"], row["image_digest"]) == (f"no {program}\n", sandbox_image)

    # The core of the escape battery, in the template: its Dockerfile ran as
    # root at build time, but a command runs as every command does.
    row = on_template.run(
        "id -u; touch /usr/x 2>&1; grep CapEff /proc/self/status; "
        "python3 -c 'import socket; socket.create_connection((\"10.0.0.1\", 53), 2)' 2>&1 "
        "| tail -1; ls /sys/class/net")
    assert row["output"].splitlines() == [
        "65000", "touch: cannot touch '/usr/x': Read-only file system",
        "CapEff:\t0000000000000000", "OSError: [Errno 101] Network is unreachable", "lo"], row
    # A file made on the template is the session's, as on the base.
    assert on_template.run("echo kept > f")["status"] == "done"
    assert on_template.run("cat f; cat /etc/pg-shell-template")["output"] == (
        f"kept\n{template}\n")
    templates = call(on_template.conn, "SELECT * FROM shell_api.list_templates()")
    assert [(t["name"], t["digest"]) for t in templates] == [("base", None), (template, image)]


def test_a_replay_runs_on_its_originals_image_after_the_template_moved_on(
        daemon, make_shell, pg_shell, tools_image, docker_client):
    make_shell("alice")  # the user, to grant the template to
    offer(pg_shell, "tools", tools_image, "alice")
    daemon.wait_for_log(f"template tools: image {tools_image} promoted", timeout=30)
    session = make_shell("alice", "tools")
    first = session.run("echo one")
    assert first["image_digest"] == tools_image

    rollout = Variants(docker_client, tools_image)
    try:
        newer = rollout.build("v2")
        assert pg_shell("image", "promote", "--template", "tools", newer).returncode == 0
        daemon.wait_for_log(f"template tools: image {newer} promoted", timeout=30)
        assert session.run("echo two")["image_digest"] == newer

        replay = one(session.conn, "SELECT shell_api.replay_session(%s, %s)",
                     (session.session_id, first["id"]))
        ids = [r["id"] for r in call(session.conn, "SELECT id FROM shell.commands "
                                                   "WHERE session_id = %s ORDER BY id", (replay,))]
        rows = [session.wait(i) for i in ids]
        assert [(r["output"], r["image_digest"]) for r in rows] == [("one\n", tools_image),
                                                                   ("two\n", newer)]
        rollout.wait_unused(newer)
    finally:
        rollout.remove_all()


def test_a_template_whose_image_no_host_has_is_left_to_other_hosts_then_failed_saying_so(
        make_daemon, make_shell, db):
    daemon = make_daemon(PG_SHELL_TEMPLATE_WAIT_S="1").start()
    missing = "sha256:" + "9" * 64
    operator = connect_as(db, "shell_admin")
    call(operator, "SELECT * FROM shell.define_template('elsewhere', 'on other hosts', true)")
    call(operator, "SELECT * FROM shell.promote_image(%s, 'elsewhere')", (missing,))
    operator.close()
    daemon.wait_for_log(f"template elsewhere: promoted image {missing} does not exist", timeout=30)
    row = make_shell("alice", "elsewhere").run("echo hi")
    assert (row["status"], row["reason"]) == (
        "failed", "template elsewhere has no image on this host, and no host with its image "
                  "took the command"), row
    # Left to hosts with the image for a second first (claimed_at is the
    # claim's transaction start, a moment before its check).
    assert (row["claimed_at"] - row["submitted_at"]).total_seconds() > 0.5, row


def test_a_new_session_on_a_template_finds_a_container_started_on_its_image(
        make_daemon, make_shell, pg_shell, tools_image, docker_client):
    daemon = make_daemon(PG_SHELL_WARM_PER_SESSION="1").start()
    make_shell("alice")  # the user, to grant the template to
    offer(pg_shell, "tools", tools_image, "alice")
    daemon.wait_for_log(f"template tools: image {tools_image} promoted", timeout=30)
    session = make_shell("alice", "tools")  # created while the executor listens
    labels = ["pg-shell.warm=1", f"pg-shell.session-id={session.session_id}"]
    [warm] = wait_for("the session's warm container",
                      lambda: docker_client.containers.list(filters={"label": labels}))
    assert warm.image.id == tools_image
    row = session.run("cat /etc/pg-shell-template")
    assert (row["output"], row["container_id"]) == ("tools\n", warm.id), row


@pytest.mark.parametrize(("lines", "reason"), [
    (["USER root", "RUN rm /opt/pg-shell/supervisor", "USER sandbox"],
     "its supervisor speaks protocol none, this executor 1"),
    (["USER root", "RUN cp /bin/true /usr/local/bin/t && chmod u+s /usr/local/bin/t",
      "USER sandbox"], "set-uid or set-gid files: /usr/local/bin/t"),
    (["USER root", "RUN rm -r /home/sandbox"],
     "it has no /home/sandbox owned by the sandbox user (uid 65000)"),
])
def test_an_image_that_breaks_the_image_contract_is_not_promoted(
        variants, pg_shell, db, lines, reason):
    broken = variants.build("broken", *lines)
    refused = pg_shell("image", "promote", broken)
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"pg-shell: image {broken} is not promoted: ")
    assert reason in refused.stderr, refused.stderr
    operator = connect_as(db, "shell_admin")
    assert call(operator, "SELECT * FROM shell.current_images()") == []
    operator.close()
