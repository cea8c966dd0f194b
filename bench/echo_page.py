"""The page's path for bench.interactive: a key pressed in the terminal view
of a running command (xterm.js, html/tty/) in headless Chromium, timed in
the page from the key's keydown to the animation frame after its echo
reached the view.

The view draws on canvases; the text of its screen is kept beside them
(`.tty-text`, written when xterm.js has rendered a frame), so that is what
is watched. Whether the page has such a view is only known when it runs:
NotMeasured says why not.
"""

from __future__ import annotations

import inspect
from typing import Any

from bench.echo_paths import KEY_STALL_S
from tests.browser.stack import Terminal

VIEW = ".tty-view"
TEXT = ".tty-text"
# Enough of the end of what was typed to tell the newest echo (keys cycle
# through the alphabet), short enough to stay on a live screen.
SUFFIX = 40
# Installed once: a capturing keydown listener takes t0 for the armed key;
# a MutationObserver on the view checks whether its text now ends with what
# was typed, and takes the time at the next animation frame. stages() says
# where the time went, from the page's own resource timings (same clock):
# when send_input was sent and answered, when the live feed's answer that
# followed it and the read_output after that arrived, ms after the keydown.
INSTALL = """
([view, text, suffix]) => {
  const state = window.__echo = {typed: "", t0: null, ms: null,
    arm(key) {
      this.typed += key; this.t0 = null; this.ms = null;
      performance.clearResourceTimings();
    },
    stages() {
      const t0 = this.t0;
      const calls = (name) => performance.getEntriesByType("resource")
        .filter((e) => new URL(e.name).pathname === `/rpc/${name}` && e.responseEnd >= t0);
      const send = calls("send_input")[0];
      if (!send) return null;
      const feed = calls("session_changes_html").find((e) => e.responseEnd >= send.startTime);
      const read = feed && calls("read_output").find((e) => e.startTime >= feed.responseEnd);
      return {send_input_sent: send.startTime - t0, send_input_answered: send.responseEnd - t0,
              feed_answered: feed ? feed.responseEnd - t0 : null,
              read_output_answered: read ? read.responseEnd - t0 : null, painted: this.ms};
    }};
  performance.setResourceTimingBufferSize(1000);
  document.addEventListener("keydown", () => {
    if (state.t0 === null) state.t0 = performance.now();
  }, {capture: true});
  const box = document.querySelector(view);
  const check = () => {
    if (state.t0 === null || state.ms !== null) return;
    const shown = box.querySelector(text).textContent.replace(/\\s+/g, "");
    if (!shown.endsWith(state.typed.slice(-suffix))) return;
    requestAnimationFrame(() => {
      if (state.ms === null) state.ms = performance.now() - state.t0;
    });
  };
  new MutationObserver(check).observe(box, {subtree: true, childList: true,
                                            characterData: true});
}
"""


class NotMeasured(Exception):
    """The page has no terminal view to measure (the reason)."""


class PagePath:
    name = "page"

    def __init__(self, browser: Any, url: str, username: str, program: str) -> None:
        if "tty" not in inspect.signature(Terminal).parameters:
            raise NotMeasured("the page has no terminal mode (tests/browser/stack.py's Terminal "
                              "takes no tty)")
        self.page = browser.new_page(viewport={"width": 1000, "height": 700})
        self.term = Terminal(self.page, url, tty=True)
        self.term.login(username)
        self.session_id = self.term.new_session("page")
        article = self.term.submit(program)
        self.article = article
        self.stages: list[dict[str, float | None] | None] = []  # per key: see INSTALL
        view = article.locator(f"{VIEW}[data-state=live]")
        try:
            view.locator(TEXT).wait_for(state="attached", timeout=KEY_STALL_S * 1000)
        except Exception as exc:
            raise NotMeasured(f"`{program}` typed in the page showed no live terminal view "
                              f"with its screen's text ({VIEW} {TEXT}): {exc}") from exc
        view.click()  # the view has the focus already; a click is what a person would do
        self.page.evaluate(INSTALL, [f"#{article.get_attribute('id')} {VIEW}", TEXT, SUFFIX])

    def press(self, key: str) -> float:
        self.page.evaluate("(key) => window.__echo.arm(key)", key)
        self.page.keyboard.press(key)
        ms = self.page.wait_for_function("() => window.__echo.ms", timeout=KEY_STALL_S * 1000)
        self.stages.append(self.page.evaluate("() => window.__echo.stages()"))
        return float(ms.json_value()) / 1000

    def close(self) -> None:
        try:
            self.page.keyboard.press("Enter")
            self.page.keyboard.press("Control+d")
            self.term.wait_finished(self.article)
        finally:
            self.page.close()
