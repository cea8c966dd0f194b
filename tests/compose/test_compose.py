"""The all-in-one deployment end to end: PostgreSQL, migrate, executor and
gateway from docker-compose.yml (images built FROM the local base, no
registry); a user made with the migrate service, a login over HTTP, and a
pipeline run through the gateway in a sandbox container on the host engine."""

from __future__ import annotations

import secrets
import time

import httpx
import pytest

from tests.compose.conftest import PORT, compose

pytestmark = [pytest.mark.docker]


@pytest.mark.timeout(1500)  # the first run builds the images (apt-get in the base)
def test_the_compose_stack_runs_a_command_end_to_end_through_the_gateway(stack, compose_guard):
    password = secrets.token_urlsafe(12)
    added = compose("run", "--rm", "-T", "migrate", "user", "add", "alice", stdin=password + "\n")
    assert added.returncode == 0, added.stderr[-3000:]
    assert added.stdout.startswith("created alice (")

    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=30) as http:
        login = http.post("/rpc/login", json={"p_username": "alice", "p_password": password})
        assert login.status_code == 200, login.text
        auth = {"Authorization": f"Bearer {login.json()['token']}"}
        session = http.post("/rpc/create_session", json={"p_name": "compose"}, headers=auth)
        assert session.status_code == 200, session.text
        session_id = session.json()
        compose_guard.append(session_id)
        submitted = http.post("/rpc/submit_command", json={"p_session_id": session_id,
                                                           "p_command": "echo hello | tr a-z A-Z"},
                              headers=auth)
        assert submitted.status_code == 200, submitted.text
        command_id = submitted.json()

        deadline = time.monotonic() + 120
        while True:
            rows = http.post("/rpc/latest_output", json={"p_session_id": session_id},
                             headers=auth).json()
            row = next(r for r in rows if r["id"] == command_id)
            if row["status"] in ("done", "failed", "cancelled"):
                break
            assert time.monotonic() < deadline, (
                f"still {row['status']}:\n{compose('logs', 'executor').stdout[-3000:]}")
            time.sleep(0.2)
    assert (row["status"], row["exit_code"], row["output"]) == ("done", 0, "HELLO\n")
    # The gateway holds no superuser password and no engine socket.
    gateway_env = compose("exec", "-T", "gateway", "env").stdout
    assert "PG_SHELL_GATEWAY_DATABASE_URL=postgresql://shell_authenticator:" in gateway_env
    assert "DATABASE_URL=postgresql://postgres" not in gateway_env
    assert compose("exec", "-T", "gateway", "test", "-e", "/var/run/docker.sock").returncode == 1
