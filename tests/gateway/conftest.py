"""Fixtures of the gateway tests: an HTTP client on the real gateway
(tests/fixtures_stack.py), a user and her token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import require
from tests.fixtures_stack import Gateway
from tests.gateway import node
from tests.gateway.api import PASSWORD
from tests.support import create_user


@pytest.fixture
def http(gateway: Gateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        yield client


@pytest.fixture
def alice(db: str) -> str:
    return create_user(db, "alice")


@pytest.fixture
def token(http: httpx.Client, alice: str) -> str:
    answer = http.post("/rpc/login", json={"p_username": "alice", "p_password": PASSWORD})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])


@pytest.fixture(scope="session")
def postgrest_js() -> Path:
    """tests/gateway/postgrest_js with its npm packages installed (node and npm are
    test-only packages of ops/install-packages)."""
    require(node.tools_present(), "node and npm")
    return node.install()
