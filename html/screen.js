// What the terminal view shows around its commands: a clear (Ctrl-L, a
// `clear` command) hides the commands shown so far while the history stays
// (they stay in the page, hidden, so ↑ still recalls them); the prompt shows
// the session's directory; the input line is as tall as its lines.
import { $ } from "./api.js";

const MAX_ROWS = 10;

// The textarea grows with its lines, up to MAX_ROWS, then scrolls.
export function fitInput() {
  const input = $("#command");
  input.rows = Math.min(MAX_ROWS, Math.max(1, input.value.split("\n").length));
}

export const screen = {
  clearedThrough: 0,   // commands up to this id are hidden by a clear
  clearOnArrival: false,

  // Hides every command shown so far; new ones appear as usual.
  clear() {
    const ids = [...$("#scrollback").querySelectorAll("article.cmd")].map((a) => Number(a.dataset.id));
    this.clearedThrough = Math.max(this.clearedThrough, ...ids, 0);
    this.hideCleared();
  },

  hideCleared() {
    for (const article of $("#scrollback").querySelectorAll("article.cmd")) {
      const id = Number(article.dataset.id);
      // A `clear` that ran cleanly hides itself too, as in a terminal.
      if (this.clearOnArrival && id > this.clearedThrough && isCleanClear(article)) {
        this.clearedThrough = id;
        this.clearOnArrival = false;
      }
      article.hidden = id <= this.clearedThrough;
    }
  },

  // A session opens: nothing of it is cleared yet.
  reset() {
    this.clearedThrough = 0;
    this.clearOnArrival = false;
  },
};

function isCleanClear(article) {
  const text = article.querySelector(".text");
  return text && text.textContent.trim() === "clear" && article.dataset.outcome === "ok";
}

// The directory of the prompt: where the newest finished command left the
// session, or (before any) where the session is.
export function showPromptCwd(fallback) {
  const finished = [...$("#scrollback").querySelectorAll("article.cmd[data-cwd]")];
  const cwd = finished.length ? finished[finished.length - 1].dataset.cwd : fallback;
  if (cwd !== undefined && cwd !== null) $("#prompt-cwd").textContent = cwd;
}

export function shortCwd(cwd) {
  if (cwd === "/home/sandbox") return "~";
  return cwd.startsWith("/home/sandbox/") ? "~" + cwd.slice("/home/sandbox".length) : cwd;
}
