"""/metrics is not on the public origin: the gateway serves it on a port of
its own (PG_SHELL_GATEWAY_METRICS_PORT), bound to 127.0.0.1 by default."""

from __future__ import annotations

import httpx
import pytest

from executor.config import Settings

pytestmark = pytest.mark.postgres


def test_the_public_origin_has_no_metrics(http: httpx.Client) -> None:
    for method in ("GET", "HEAD"):
        answer = http.request(method, "/metrics")
        assert answer.status_code == 404
        assert b"pg_shell_gateway_requests_total" not in answer.content


def test_metrics_listen_on_loopback_by_default() -> None:
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    assert defaults.metrics_host == "127.0.0.1"
    assert defaults.gateway_metrics_port not in (0, defaults.listen_port, defaults.metrics_port)
