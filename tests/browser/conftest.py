"""Browser fixtures: headless Chromium driven by Playwright, in front of the
real gateway and executor daemon (the `daemon` and `gateway` fixtures of
tests/fixtures_stack.py) on the test's fresh database. The page helper lives
in tests/browser/stack.py so bench.ui can use it too."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.stack import Terminal, chromium_path, launch_chromium, playwright_available
from tests.conftest import require
from tests.fixtures_stack import Daemon, Gateway
from tests.support import create_user

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    require(playwright_available(), "the playwright Python package (pip install -e '.[test]')")
    require(chromium_path() is not None, "Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    # Commands run in containers on a shared machine: be patient.
    expect.set_options(timeout=60_000)
    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        yield browser
        browser.close()


@pytest.fixture
def stack(daemon: Daemon, gateway: Gateway) -> Gateway:
    """The daemon and the gateway, both running against the test's database."""
    return gateway


@pytest.fixture
def open_terminal(browser: Any, stack: Gateway, db: str) -> Iterator[Callable[..., Terminal]]:
    """Signs a (new) user in, in a browser context of their own."""
    contexts: list[Any] = []
    users: set[str] = set()

    def open_(username: str = "alice", width: int = 1000, height: int = 700,
              tty: bool = False) -> Terminal:
        if username not in users:
            create_user(db, username)
            users.add(username)
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        terminal = Terminal(context.new_page(), stack.url, tty=tty)
        terminal.login(username)
        return terminal

    yield open_
    for context in contexts:
        context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
