// What changes in the open session arrives by itself: a loop asks the change
// feed (session_changes_html) for what changed after the newest change the
// page has seen. The gateway holds the request until something changes;
// plain PostgREST answers at once, so an empty quick answer waits a little
// before asking again. p_tail: a running command's output comes as what was
// appended since the cursor, never the whole of it again.
"use strict";

const live = {
  cursor: 0,          // the largest data-change seen: the change feed resumes there
  abort: null,

  // Ends the loop of the session shown so far; the next session's starts
  // from its own first page.
  stop() {
    if (this.abort) this.abort.abort();
    this.abort = null;
    this.cursor = 0;
  },

  // Runs while `generation` is the terminal's: opening or closing a session
  // ends it.
  async follow(generation) {
    let failures = 0;
    while (generation === terminal.generation) {
      this.abort = new AbortController();
      const started = performance.now();
      try {
        const html = await rpc("session_changes_html", {
          get: true, html: true, signal: this.abort.signal, headers: { Prefer: "wait=20" },
          args: { p_session_id: terminal.sessionId, p_after_change: this.cursor, p_tail: true } });
        if (generation !== terminal.generation) return;
        failures = 0;
        if (html.trim()) applyFragments(html);
        else if (performance.now() - started < 1000) await sleep(500);
      } catch (error) {
        if (generation !== terminal.generation || error.name === "AbortError") return;
        if (error.status === 429) { await sleep(2000); continue; }  // too many waiting: Retry-After
        fail(error);
        if (error.status === 401 || error.status === 400 || error.status === 403) return;
        failures += 1;
        await sleep(Math.min(10000, 500 * 2 ** failures));
      }
    }
  },
};
