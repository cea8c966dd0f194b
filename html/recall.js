// ↑ and ↓ on the input line recall the session's commands, as a shell's
// history does: first those the scrollback shows, then, past the oldest
// loaded, older ones fetched a page at a time (their text only). The keys
// are input.js's; this is what they walk through.
import { $, rpc } from "./api.js";

export const recall = {
  history: [],        // while recalling: the commands shown, oldest first
  index: 0,
  draft: "",          // the line as it was when the recall started
  earlier: [],        // commands older than the page shows, fetched for ↑ (oldest first)
  done: false,        // ↑ has fetched every older command

  // A session opens: nothing of it fetched yet.
  forget() {
    this.earlier = [];
    this.done = false;
    this.reset();
  },

  // History is what the scrollback shows (uploads are not commands to run
  // again), after the older commands ↑ fetched; it is read when a recall
  // starts, so a sent command or a page loaded ends the one under way.
  reset() {
    this.history = [];
    this.index = 0;
    this.draft = "";
  },

  start(draft) {
    this.history = [...this.earlier.map((c) => c.command),
      ...[...$("#scrollback").querySelectorAll("article.cmd:not(.upload) .text")]
        .map((t) => t.textContent)];
    this.index = this.history.length;
    this.draft = draft;
  },

  // A page of history now shows the commands from `oldestShown` on: ↑'s
  // own fetches of them are dropped.
  shown(oldestShown) {
    this.earlier = this.earlier.filter((c) => c.id < oldestShown);
    this.reset();
  },

  // ↑ past the oldest command loaded: the commands before it (text only,
  // p_output_limit 0), a page at a time. `page` is the terminal's: its
  // session, its oldest command loaded and whether there are older ones.
  // True if any were added.
  async fetchEarlier({ sessionId, earliestId, moreEarlier }) {
    const oldest = this.earlier.length ? this.earlier[0].id : earliestId;
    if (!moreEarlier || this.done || oldest === null) return false;
    const rows = await rpc("latest_output", { get: true, args: {
      p_session_id: sessionId, p_since_id: 0, p_limit: 1000, p_before_id: oldest,
      p_output_limit: 0, select: "id,command" } });
    this.done = rows.length < 1000;
    this.earlier = [...rows, ...this.earlier];
    return rows.length > 0;
  },
};
