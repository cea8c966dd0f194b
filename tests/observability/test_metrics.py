"""/metrics of the real executor daemon and the real gateway, scraped after
running commands: counters move by exactly what happened, histograms have
the observations, and the queue depth is what the database holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures_stack import Gateway, free_port
from tests.observability.conftest import PASSWORD, wait_for
from tests.support import call

pytestmark = [pytest.mark.postgres, pytest.mark.docker]


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample: (name, sorted labels) → value."""
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def executor_url(daemon: Any) -> str:
    return f"http://127.0.0.1:{daemon.env['PG_SHELL_METRICS_PORT']}/metrics"


def test_executor_metrics_count_commands_time_output_and_tenants(db, make_tenant, metrics_daemon):
    alice, bob = make_tenant("alice"), make_tenant("bob")
    ran = [alice.run("echo hello"), alice.run("printf '%s' héllo; exit 3"), bob.run("echo bob")]
    samples = wait_for("the last completion to be counted",
                       lambda: (s := scrape(executor_url(metrics_daemon)))
                       and value(s, "pg_shell_commands_completed_total", status="done",
                                 reason="none") == 3
                       and s)

    assert value(samples, "pg_shell_tenant_commands_total", user_id=alice.user_id) == 2
    assert value(samples, "pg_shell_tenant_commands_total", user_id=bob.user_id) == 1
    for who, rows in [(alice, ran[:2]), (bob, ran[2:])]:
        assert value(samples, "pg_shell_tenant_run_seconds_total", user_id=who.user_id) == \
            pytest.approx(sum(r["duration_ms"] for r in rows) / 1000)
    output_bytes = value(samples, "pg_shell_output_bytes_total")
    assert output_bytes == sum(r["output_bytes"] for r in ran) == 6 + 6 + 4
    assert value(samples, "pg_shell_command_run_seconds_count") == 3
    assert value(samples, "pg_shell_command_run_seconds_sum") == \
        pytest.approx(sum(r["duration_ms"] for r in ran) / 1000)
    assert value(samples, "pg_shell_command_run_seconds_bucket", le="+Inf") == 3
    assert value(samples, "pg_shell_command_claim_to_start_seconds_count") == 3
    assert value(samples, "pg_shell_command_claim_to_start_seconds_sum") > 0
    assert value(samples, "pg_shell_container_start_failures_total") == 0
    assert value(samples, "pg_shell_commands_running") == 0
    assert value(samples, "pg_shell_queue_depth") == 0

    # One command running, two queued behind it in its session.
    blocker = alice.submit("sleep 60")
    queued = [alice.submit("echo after 1"), alice.submit("echo after 2")]
    wait_for("the blocker to run", lambda: alice.command(blocker)["status"] == "running")
    samples = wait_for("the queue depth to be read",
                       lambda: (s := scrape(executor_url(metrics_daemon)))
                       and value(s, "pg_shell_queue_depth") == 2 and s)
    assert value(samples, "pg_shell_commands_running") == 1
    call(alice.conn, "SELECT shell_api.cancel_command(%s)", (blocker,))
    assert alice.wait(blocker)["status"] == "cancelled"
    for command_id in queued:
        alice.wait(command_id)
    samples = wait_for("the cancel to be counted",
                       lambda: (s := scrape(executor_url(metrics_daemon)))
                       and value(s, "pg_shell_commands_completed_total", status="done",
                                 reason="none") == 5
                       and value(s, "pg_shell_queue_depth") == 0 and s)
    assert value(samples, "pg_shell_commands_completed_total", status="cancelled",
                 reason="cancelled") == 1
    assert value(samples, "pg_shell_tenant_commands_total", user_id=alice.user_id) == 5


@pytest.fixture
def metrics_gateway(db: str, tmp_path: Path) -> Iterator[tuple[Gateway, str]]:
    """The real gateway with its metrics on a free port: (gateway, metrics url)."""
    port = free_port()
    gw = Gateway(db, tmp_path / "gateway.log").start(PG_SHELL_GATEWAY_METRICS_PORT=str(port))
    yield gw, f"http://127.0.0.1:{port}/metrics"
    gw.stop()


def test_gateway_metrics_count_requests_by_function_and_status_and_read_the_queue_depth(
        db, metrics_gateway, make_tenant):
    gateway, metrics_url = metrics_gateway
    alice = make_tenant("alice")
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        token = http.post("/rpc/login",
                          json={"p_username": "alice", "p_password": PASSWORD}).json()["token"]
        refused = http.post("/rpc/login", json={"p_username": "alice", "p_password": "wrong horse"})
        assert refused.status_code == 403
        auth = {"Authorization": f"Bearer {token}"}
        for _ in range(3):
            queued = {"p_session_id": alice.session_id, "p_command": "echo queued"}
            submitted = http.post("/rpc/submit_command", headers=auth, json=queued)
            assert submitted.status_code == 200
        assert http.post("/rpc/no_such_function", headers=auth, json={}).status_code == 404
        unknown = http.post("/rpc/latest_output", headers=auth,
                            json={"p_session_id": "00000000-0000-0000-0000-000000000000"})
        assert unknown.status_code == 400

    samples = scrape(metrics_url)
    requests = "pg_shell_gateway_requests_total"
    assert value(samples, requests, function="login", status="200") == 1
    assert value(samples, requests, function="login", status="403") == 1
    assert value(samples, requests, function="submit_command", status="200") == 3
    assert value(samples, requests, function="unknown", status="404") == 1
    assert value(samples, requests, function="latest_output", status="400") == 1
    assert sum(v for (name, _), v in samples.items() if name == requests) == 7
    # No executor runs here: the three commands stay queued.
    wait_for("the gateway to read the queue depth",
             lambda: value(scrape(metrics_url), "pg_shell_queue_depth") == 3)
