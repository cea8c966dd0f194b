// The open session: opening and closing it, its name and directory, its
// history a page at a time ("load earlier" above the oldest shown), and the
// command still to finish. What arrives later is live.js's; how fragments
// are put into the scrollback is scrollback.js's; the lineage above it, the
// secrets it uses and the files panel are htmx's views (index.html), told
// here when to load.
import { $, fail, rpc } from "./api.js";
import { ACTIVE } from "./command-status.js";
import { files } from "./files.js";
import { live } from "./live.js";
import { recall } from "./recall.js";
import { applyFragments, forgetChanges } from "./scrollback.js";
import { fitInput, screen, shortCwd, showPromptCwd } from "./screen.js";
import { sessionSecrets } from "./session-secrets.js";
import { show } from "./views.js";

const PAGE = 100;      // commands per page of history

export const terminal = {
  sessionId: null,
  generation: 0,      // bumps on every open/close so a stale answer stops
  earliestId: null,   // the oldest command id loaded (page or ↑), or null before any
  moreEarlier: false, // whether commands older than earliestId exist

  close() {
    this.generation += 1;
    live.stop();
    this.sessionId = null;
    files.close();
  },

  async open(id) {
    this.close();
    const generation = this.generation;
    this.sessionId = id;
    this.earliestId = null;
    this.moreEarlier = false;
    recall.forget();
    screen.reset();
    forgetChanges();
    $("#session-id").value = id;
    // Until its first command, an empty session says what the sandbox is.
    $("#scrollback").replaceChildren($("#sandbox-about").content.firstElementChild.cloneNode(true));
    $("#where").textContent = id;
    $("#prompt-cwd").textContent = "";
    fitInput();
    show("terminal-view");
    warmSession(id);
    lineage();
    sessionSecrets.open();
    files.open(id);
    $("#command").focus();
    this.describe(id, generation);
    try {
      const html = await rpc("latest_output_html", { get: true, html: true,
        args: { p_session_id: id, p_since_id: 0, p_limit: PAGE } });
      if (generation !== this.generation) return;
      const count = applyFragments(html, true);
      this.noteEarliest(count);
      live.follow(id);
    } catch (error) {
      if (generation === this.generation) fail(error);
    }
  },

  // The session's name in the header, and the prompt's directory until its
  // commands say otherwise (text only: the views are rendered by the server).
  async describe(id, generation) {
    try {
      const session = (await rpc("list_sessions", { get: true })).find((s) => s.id === id);
      if (!session || generation !== this.generation) return;
      $("#where").textContent = session.name || id;
      showPromptCwd(shortCwd(session.cwd));
    } catch (_) { /* the history's read reports errors */ }
  },

  // After a page of history: where "load earlier" and ↑ continue from.
  noteEarliest(count) {
    const first = $("#scrollback article.cmd");
    if (first) this.earliestId = Number(first.dataset.id);
    this.moreEarlier = count >= PAGE;
    showLoadEarlier(this.moreEarlier);
  },

  // The page of history before the oldest command shown, put above it
  // without moving what is on screen.
  async loadEarlier() {
    if (!this.moreEarlier || this.earliestId === null) return;
    const generation = this.generation;
    const before = this.earliestId;
    const html = await rpc("latest_output_html", { get: true, html: true,
      args: { p_session_id: this.sessionId, p_since_id: 0, p_limit: PAGE, p_before_id: before } });
    if (generation !== this.generation) return;
    const box = $("#scrollback");
    const fromBottom = box.scrollHeight - box.scrollTop;
    const count = applyFragments(html, true);
    box.scrollTop = box.scrollHeight - fromBottom;
    recall.shown(Number($("#scrollback article.cmd").dataset.id));
    this.noteEarliest(count);
  },

  activeCommand() {
    const active = [...$("#scrollback").querySelectorAll("article.cmd")]
      .filter((a) => ACTIVE.has(a.dataset.status));
    // The running one first (it is the oldest active), else the newest queued.
    return active.length ? active[0].dataset.id : null;
  },
};

// The lineage above the session (session_lineage_html, for the session in
// #session-id): emptied at once, so another session's does not linger.
function lineage() {
  const nav = $("#lineage");
  nav.replaceChildren();
  htmx.trigger(nav, "refresh");
}

// Asks the executors to start the session's next container now, while the
// person reads and types, so the first command does not wait for one. Only
// a hint: nothing waits for it, and its answer and any error (a server
// without the function included) are ignored.
function warmSession(id) {
  rpc("warm_session", { args: { p_session_id: id } }).catch(() => {});
}

function showLoadEarlier(visible) {
  const box = $("#scrollback");
  let row = box.querySelector(":scope > .earlier");
  if (!visible) { if (row) row.remove(); return; }
  if (!row) {
    row = document.createElement("p");
    row.className = "earlier";
    const button = document.createElement("button");
    button.type = "button";
    button.id = "load-earlier";
    button.textContent = "load earlier commands";
    row.append(button);
  }
  box.prepend(row);
}

$("#scrollback").addEventListener("click", async (event) => {
  const button = event.target.closest("#load-earlier");
  if (!button) return;
  button.disabled = true;
  try {
    await terminal.loadEarlier();
  } catch (error) {
    fail(error);
  } finally {
    button.disabled = false;
  }
});
