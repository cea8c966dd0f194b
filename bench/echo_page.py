"""The page's path for bench.interactive: a key pressed in the terminal view
of a running command (xterm.js, html/tty/) in headless Chromium, timed in
the page from the key's keydown until the frame that draws its echo has
been painted. The start of the frame after it is reported beside that: it
is when a 60 Hz screen shows that frame at the latest.

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
# was typed. That text is written when xterm.js has drawn a frame, in the
# frame's animation callback: a task queued from there runs once the frame
# is painted (the key's time), and the next animation frame starts one
# frame later (next_frame). stages() says where the time went, from the
# page's own resource timings (same clock): when send_input was sent and
# answered, when the live feed's answer that followed it and the
# read_output after that arrived, ms after the keydown.
INSTALL = """
([view, text, suffix]) => {
  const state = window.__echo = {typed: "", t0: null, ms: null, nextFrame: null, seen: false,
    arm(key) {
      this.typed += key; this.t0 = null; this.ms = null; this.nextFrame = null; this.seen = false;
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
              read_output_answered: read ? read.responseEnd - t0 : null, painted: this.ms,
              next_frame: this.nextFrame};
    }};
  performance.setResourceTimingBufferSize(1000);
  document.addEventListener("keydown", () => {
    if (state.t0 === null) state.t0 = performance.now();
  }, {capture: true});
  const box = document.querySelector(view);
  const check = () => {
    if (state.t0 === null || state.seen) return;
    const shown = box.querySelector(text).textContent.replace(/\\s+/g, "");
    if (!shown.endsWith(state.typed.slice(-suffix))) return;
    state.seen = true;
    const painted = new MessageChannel();
    painted.port1.onmessage = () => { state.ms = performance.now() - state.t0; };
    painted.port2.postMessage(null);
    requestAnimationFrame(() => { state.nextFrame = performance.now() - state.t0; });
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
        self.page.wait_for_function("() => window.__echo.nextFrame", timeout=KEY_STALL_S * 1000)
        self.stages.append(self.page.evaluate("() => window.__echo.stages()"))
        return float(self.page.evaluate("() => window.__echo.ms")) / 1000

    def close(self) -> None:
        try:
            self.page.keyboard.press("Enter")
            self.page.keyboard.press("Control+d")
            self.term.wait_finished(self.article)
        finally:
            self.page.close()
