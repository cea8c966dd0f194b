"""What a browser test (and bench.ui) drives: Debian's Chromium and the
terminal page."""

from __future__ import annotations

import importlib.util
import re
import shutil
from typing import Any

PASSWORD = "correct horse"  # tests.support.create_user's default
FINISHED = re.compile(r"^(done|failed|cancelled)$")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def playwright_available() -> bool:
    return importlib.util.find_spec("playwright") is not None


def chromium_path() -> str | None:
    return shutil.which("chromium")


def launch_chromium(pw: Any) -> Any:
    # Debian's chromium, never Playwright's own download.
    return pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)


class Terminal:
    """The page as a user drives it. Commands typed at its prompt run with
    plain output (HTML fragments) unless ``tty``: the page's default is a
    terminal (its "tty" switch on), which tests/browser/test_interactive.py
    drives; the other tests and bench.ui are about the fragments."""

    def __init__(self, page: Any, url: str, tty: bool = False) -> None:
        self.page = page
        self.url = url
        self.tty = tty
        self.dialogs: list[str] = []
        page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))

    def expect(self, target: Any) -> Any:
        from playwright.sync_api import expect

        return expect(target)

    def login(self, username: str, password: str = PASSWORD) -> None:
        self.page.goto(self.url + "/")
        # The switch is kept per origin (localStorage), read at each submit.
        self.page.evaluate("mode => localStorage.setItem('pg_shell.tty', mode)",
                           "on" if self.tty else "off")
        self.page.fill("#login-form [name=p_username]", username)
        self.page.fill("#login-form [name=p_password]", password)
        self.page.click("#login-form button[type=submit]")
        try:
            self.expect(self.page.locator("#sessions-view")).to_be_visible()
        except AssertionError as exc:
            status = self.status.text_content()
            raise AssertionError(f"sign-in failed; status line: {status!r}") from exc

    @property
    def status(self) -> Any:
        return self.page.locator("#status")

    @property
    def scrollback(self) -> Any:
        return self.page.locator("#scrollback")

    @property
    def input(self) -> Any:
        return self.page.locator("#command")

    def session_id(self) -> str:
        match = re.fullmatch(r"#session=([0-9a-f-]{36})", self.page.evaluate("location.hash"))
        assert match, self.page.url
        return match.group(1)

    def new_session(self, name: str | None = None) -> str:
        if name:
            self.page.fill("#new-session-form [name=p_name]", name)
        self.page.click("#new-session-form button[type=submit]")
        self.expect(self.page.locator("#terminal-view")).to_be_visible()
        return self.session_id()

    def commands(self) -> Any:
        return self.page.locator("#scrollback article.cmd")

    def submit(self, command: str) -> Any:
        """Types the command and presses Enter; the command's article."""
        before = self.commands().count()
        self.input.fill(command)
        self.input.press("Enter")
        self.expect(self.commands()).to_have_count(before + 1)
        article = self.commands().last
        self.expect(article.locator(".text")).to_have_text(command)
        return self.page.locator("#" + article.get_attribute("id"))

    def wait_finished(self, article: Any) -> Any:
        # A minute, as the tests' default: bench.ui sets no default, and a
        # streaming command on a busy machine outlasts Playwright's 5 s.
        self.expect(article).to_have_attribute("data-status", FINISHED, timeout=60_000)
        return article

    def run(self, command: str) -> Any:
        return self.wait_finished(self.submit(command))
