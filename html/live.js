// What changes in the open session arrives by itself: a loop asks the change
// feed (session_changes_html) for what changed after the newest change the
// page has seen. The gateway holds the request until something changes;
// plain PostgREST answers at once, so an empty quick answer waits a little
// before asking again. p_tail: a running command's output comes as what was
// appended since the cursor, never the whole of it again. htmx has no
// long-poll that resumes from a cursor, so this loop is the page's own.
import { fail, rpc, sleep } from "./api.js";
import { applyFragments, newestChange } from "./scrollback.js";

export const live = {
  generation: 0,      // bumps on stop: the loop of an earlier follow ends
  abort: null,

  // Ends the loop of the session shown so far.
  stop() {
    this.generation += 1;
    if (this.abort) this.abort.abort();
    this.abort = null;
  },

  // Runs until stop(): opening or closing a session ends it.
  async follow(sessionId) {
    this.stop();
    const generation = this.generation;
    let failures = 0;
    while (generation === this.generation) {
      this.abort = new AbortController();
      const started = performance.now();
      try {
        const html = await rpc("session_changes_html", {
          get: true, html: true, signal: this.abort.signal, headers: { Prefer: "wait=20" },
          args: { p_session_id: sessionId, p_after_change: newestChange(), p_tail: true } });
        if (generation !== this.generation) return;
        failures = 0;
        if (html.trim()) applyFragments(html);
        else if (performance.now() - started < 1000) await sleep(500);
      } catch (error) {
        if (generation !== this.generation || error.name === "AbortError") return;
        if (error.status === 429) { await sleep(2000); continue; }  // too many waiting: Retry-After
        fail(error);
        if (error.status === 401 || error.status === 400 || error.status === 403) return;
        failures += 1;
        await sleep(Math.min(10000, 500 * 2 ** failures));
      }
    }
  },
};
