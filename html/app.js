// pg_shell's page: sign-in, the session list and the terminal. htmx posts
// commands; this file keeps the token, the live-output loop, the input
// line's history and the buttons the server's fragments carry. The files
// panel is files.js, loaded after this file.
"use strict";

const TOKEN_KEY = "pg_shell.token";
const ACTIVE = new Set(["pending", "claimed", "running"]);
const $ = (sel) => document.querySelector(sel);

// ---- the status line and calls to /rpc ------------------------------------

function showStatus(text, isError = true) {
  const el = $("#status");
  el.textContent = text || "";
  el.classList.toggle("error", Boolean(text) && isError);
}

class ApiError extends Error {
  constructor(status, body) {
    const message = (body && body.message) || `HTTP ${status}`;
    super(body && body.hint ? `${message} — ${body.hint}` : message);
    this.status = status;
  }
}

async function errorOf(response) {
  let body = null;
  try { body = JSON.parse(await response.text()); } catch (_) { /* not JSON */ }
  return new ApiError(response.status, body);
}

// The token lives in localStorage: every tab of this origin (and only this
// origin) shares it, so a session link opened in a new tab is signed in.
// It is dropped once its "exp" has passed; see README, "Signing in".
function token() {
  const value = localStorage.getItem(TOKEN_KEY);
  if (value && tokenExpired(value)) { forgetToken(); return null; }
  return value;
}

function tokenExpired(value) {
  try {
    const payload = JSON.parse(atob(value.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    return typeof payload.exp === "number" && payload.exp * 1000 <= Date.now();
  } catch (_) { return true; }
}

function rememberToken(value) { localStorage.setItem(TOKEN_KEY, value); }
function forgetToken() { localStorage.removeItem(TOKEN_KEY); }

// One /rpc call: JSON in, JSON (or HTML with html: true, a Blob of the raw
// bytes with bytes: true) out.
async function rpc(name, { args = null, get = false, html = false, bytes = false, signal, headers = {} } = {}) {
  const init = { method: get ? "GET" : "POST", signal, headers: { ...headers } };
  let url = `/rpc/${name}`;
  if (get && args) url += "?" + new URLSearchParams(args);
  if (!get) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(args || {});
  }
  if (token()) init.headers.Authorization = `Bearer ${token()}`;
  init.headers.Accept = html ? "text/html" : bytes ? "application/octet-stream" : "application/json";
  const response = await fetch(url, init);
  if (!response.ok) throw await errorOf(response);
  return html ? response.text() : bytes ? response.blob() : response.json();
}

function fail(error) {
  if (error.name === "AbortError") return;
  if (error.status === 401) {
    forgetToken();
    showStatus("Please sign in again: " + error.message);
    route();
    return;
  }
  showStatus(error.message);
}

// ---- views -----------------------------------------------------------------

function show(view) {
  for (const id of ["login-view", "sessions-view", "terminal-view", "compare-view"]) {
    $("#" + id).hidden = id !== view;
  }
  $("#logout").hidden = view === "login-view";
  document.body.dataset.view = view;
}

function sessionFromHash() {
  const match = /^#session=([0-9a-f-]{36})$/i.exec(location.hash);
  return match ? match[1].toLowerCase() : null;
}

function route() {
  terminal.close();
  if (!token()) {
    $("#where").textContent = "";
    show("login-view");
    $("#login-form [name=p_username]").focus();
    return;
  }
  const id = sessionFromHash();
  const run = replayFromHash();
  if (id) terminal.open(id);
  else if (run) comparison.open(run);
  else sessions.open();
}

// ---- sign-in ---------------------------------------------------------------

$("#login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  try {
    forgetToken();
    const answer = await rpc("login", { args: {
      p_username: form.p_username.value, p_password: form.p_password.value } });
    rememberToken(answer.token);
    form.reset();
    showStatus("");
    route();
  } catch (error) { fail(error); }
});

$("#logout").addEventListener("click", () => {
  forgetToken();
  showStatus("Signed out.", false);
  route();
});

// Signing out in one tab signs out the others.
window.addEventListener("storage", (event) => {
  if (event.key === TOKEN_KEY && !event.newValue) route();
});

// ---- the session list --------------------------------------------------------

const sessions = {
  async open() {
    show("sessions-view");
    $("#where").textContent = "sessions";
    try {
      const list = await rpc("list_sessions", { get: true });
      const ul = $("#session-list");
      ul.replaceChildren(...sessionItems(list));
      if (!list.length) ul.innerHTML = '<li class="empty">No sessions yet.</li>';
    } catch (error) { fail(error); }
  },
};

$("#new-session-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = event.target.p_name.value.trim();
  try {
    const id = await rpc("create_session", { args: name ? { p_name: name } : {} });
    event.target.reset();
    location.hash = `#session=${id}`;
  } catch (error) { fail(error); }
});

// ---- the terminal ------------------------------------------------------------

const PAGE = 100;      // commands per page of history

const terminal = {
  sessionId: null,
  cursor: 0,          // the largest data-change seen: the change feed resumes there
  generation: 0,      // bumps on every open/close so a stale loop stops
  abort: null,
  history: [],        // while recalling: the commands shown, oldest first
  historyIndex: 0,
  draft: "",
  lastSent: "",
  earlier: [],        // commands older than the page shows, fetched for ↑ (oldest first)
  earliestId: null,   // the oldest command id loaded (page or ↑), or null before any
  moreEarlier: false, // whether commands older than earliestId exist
  recallDone: false,  // ↑ has fetched every older command

  close() {
    this.generation += 1;
    if (this.abort) this.abort.abort();
    this.abort = null;
    this.sessionId = null;
    files.close();
  },

  async open(id) {
    this.close();
    const generation = this.generation;
    this.sessionId = id;
    this.cursor = 0;
    this.earlier = [];
    this.earliestId = null;
    this.moreEarlier = false;
    this.recallDone = false;
    this.resetHistory();
    $("#session-id").value = id;
    $("#scrollback").replaceChildren();
    $("#where").textContent = id;
    show("terminal-view");
    files.open(id);
    $("#command").focus();
    rpc("list_sessions", { get: true }).then((list) => {
      const s = list.find((x) => x.id === id);
      if (s && generation === this.generation) $("#where").textContent = s.name || id;
    }).catch(() => {});
    try {
      const html = await rpc("latest_output_html", { get: true, html: true,
        args: { p_session_id: id, p_since_id: 0, p_limit: PAGE } });
      if (generation !== this.generation) return;
      const count = this.apply(html, true);
      this.noteEarliest(count);
      this.follow(generation);
    } catch (error) {
      if (generation === this.generation) fail(error);
    }
  },

  // The long-poll loop: the gateway holds the request until something
  // changes; plain PostgREST answers at once, so an empty quick answer waits
  // a little before asking again. p_tail: a running command's output comes
  // as what was appended since the cursor, never the whole of it again.
  async follow(generation) {
    let failures = 0;
    while (generation === this.generation) {
      this.abort = new AbortController();
      const started = performance.now();
      try {
        const html = await rpc("session_changes_html", {
          get: true, html: true, signal: this.abort.signal, headers: { Prefer: "wait=20" },
          args: { p_session_id: this.sessionId, p_after_change: this.cursor, p_tail: true } });
        if (generation !== this.generation) return;
        failures = 0;
        if (html.trim()) this.apply(html);
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

  // Puts fragments into the scrollback: a known command is updated in place
  // (its output appended), a new one goes in id order. Keeps the view pinned
  // to the bottom if it was there. A finished command that changed files (it
  // carries a summary of its changes) has the files panel read them again.
  // Returns how many commands the fragments held.
  apply(html, initial = false) {
    const box = $("#scrollback");
    const pinned = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    const template = document.createElement("template");
    template.innerHTML = html;
    const articles = [...template.content.querySelectorAll("article.cmd")];
    const known = new Map([...box.querySelectorAll("article.cmd")].map((a) => [a.id, a]));
    let filesChanged = false;
    let announced = "";
    let inPlace = false;
    const fresh = [];
    for (const article of articles) {
      this.cursor = Math.max(this.cursor, Number(article.dataset.change) || 0);
      filesChanged ||= article.querySelector(":scope > details.changes") !== null;
      const existing = known.get(article.id);
      if (existing) {
        announced += updateInPlace(existing, article);
        inPlace = true;
      } else {
        insertInOrder(box, article);
        known.set(article.id, article);
        if (!initial) announced += outputText(article);
        fresh.push(article);
      }
    }
    // Measured all at once, then drawn: one layout, however many commands.
    const tall = fresh.map((a) => isTall(a));
    fresh.forEach((a, i) => fitOutput(a, tall[i]));
    if (inPlace) afterInPlaceUpdate();
    if (announced) announce(announced);
    if (pinned) box.scrollTop = box.scrollHeight;
    if (filesChanged && !initial) files.changed();
    return articles.length;
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
    const count = this.apply(html, true);
    box.scrollTop = box.scrollHeight - fromBottom;
    // ↑'s own fetches of older commands are now on the page.
    this.earlier = this.earlier.filter((c) => c.id < Number($("#scrollback article.cmd").dataset.id));
    this.noteEarliest(count);
    this.resetHistory();
  },

  // ↑ past the oldest command shown: the commands before it (text only,
  // p_output_limit 0), a page at a time. True if any were added.
  async recallEarlier() {
    const oldest = this.earlier.length ? this.earlier[0].id : this.earliestId;
    if (!this.moreEarlier || this.recallDone || oldest === null) return false;
    const rows = await rpc("latest_output", { get: true, args: {
      p_session_id: this.sessionId, p_since_id: 0, p_limit: 1000, p_before_id: oldest,
      p_output_limit: 0, select: "id,command" } });
    this.recallDone = rows.length < 1000;
    this.earlier = [...rows, ...this.earlier];
    return rows.length > 0;
  },

  // History is what the scrollback shows (uploads are not commands to run
  // again), after the older commands ↑ fetched; it is read when a recall
  // starts.
  resetHistory() {
    this.history = [];
    this.historyIndex = 0;
    this.draft = "";
  },

  startRecall(draft) {
    this.history = [...this.earlier.map((c) => c.command),
      ...[...$("#scrollback").querySelectorAll("article.cmd:not(.upload) .text")]
        .map((t) => t.textContent)];
    this.historyIndex = this.history.length;
    this.draft = draft;
  },

  activeCommand() {
    const active = [...$("#scrollback").querySelectorAll("article.cmd")]
      .filter((a) => ACTIVE.has(a.dataset.status));
    // The running one first (it is the oldest active), else the newest queued.
    return active.length ? active[0].dataset.id : null;
  },
};

function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

function insertInOrder(box, article) {
  const id = Number(article.dataset.id);
  const last = box.querySelector(":scope > article.cmd:last-of-type");
  if (!last || Number(last.dataset.id) < id) { box.append(article); return; }
  let after = null;
  for (const a of box.querySelectorAll("article.cmd")) {
    if (Number(a.dataset.id) > id) { after = a; break; }
  }
  box.insertBefore(article, after);
}

// ---- a command's output: appended, cut, collapsed ---------------------------
//
// A <pre class="out"> holds bytes [data-from, data-end) of the command's
// output, whose whole size is data-bytes. The feed's fragments (p_tail) carry
// what was appended since the cursor: a piece that starts where the page's
// copy ends is appended, so the text and any selection in it stay as they
// are. Otherwise (a cut preview, a gap) the rest is read with read_output.

// (A fragment rendered without them, htmx's answer to a submit, holds
// its whole output so far.)
function pre(article) {
  const out = article.querySelector(":scope > pre.out");
  if (out && out.dataset.end === undefined) {
    const size = String(new TextEncoder().encode(out.textContent).length);
    Object.assign(out.dataset, { from: "0", end: size, bytes: size });
  }
  return out;
}

// Brings ``existing`` up to ``incoming`` (the same command, newer or equal
// change): attributes and everything around the output are replaced, the
// output node itself is kept and only grows. Returns the new output's text.
function updateInPlace(existing, incoming) {
  if (Number(existing.dataset.change) > Number(incoming.dataset.change)) return "";
  for (const { name } of [...existing.attributes]) {
    if (!incoming.hasAttribute(name)) existing.removeAttribute(name);
  }
  const collapsed = existing.classList.contains("collapsed");
  for (const { name, value } of [...incoming.attributes]) existing.setAttribute(name, value);
  existing.classList.toggle("collapsed", collapsed);
  const out = pre(existing);
  const piece = pre(incoming);
  let added = "";
  if (out && piece) {
    const from = Number(piece.dataset.from);
    const end = Number(out.dataset.end);
    out.dataset.bytes = String(Math.max(Number(out.dataset.bytes), Number(piece.dataset.bytes)));
    if (from === end && !out.dataset.filling) {
      added = piece.textContent;
      out.append(...piece.childNodes);
      out.dataset.end = piece.dataset.end;
    } else if (from === 0 && Number(piece.dataset.end) >= end && !out.dataset.filling) {
      out.replaceChildren(...piece.childNodes);  // a whole copy (htmx's submit answer)
      out.dataset.end = piece.dataset.end;
    }
  }
  for (const child of [...existing.children]) {
    if (child !== out) child.remove();
  }
  let before = true;
  for (const child of [...incoming.children]) {
    if (child.matches("pre.out")) { before = false; continue; }
    if (child.matches("p.cut")) continue;  // drawn by fitOutput
    if (before && out) existing.insertBefore(child, out); else existing.append(child);
  }
  fitOutput(existing, isTall(existing));
  if (out && Number(out.dataset.end) < Number(out.dataset.bytes) && ACTIVE.has(existing.dataset.status)) {
    fill(existing);  // a running command's output: keep it whole
  }
  return added;
}

// Whether a finished command's output is longer than a screen (it is then
// collapsed until asked for); a running one stays open.
function isTall(article) {
  const out = pre(article);
  return Boolean(out) && !ACTIVE.has(article.dataset.status) && !article.dataset.expanded
    && out.scrollHeight > window.innerHeight * 0.6;
}

// The "show all" control: an output cut by the server (the rest is read
// here) or collapsed.
function fitOutput(article, tall = false) {
  const out = pre(article);
  if (!out) return;
  const marker = article.querySelector(":scope > p.cut");  // the server's, for pages without script
  if (marker) marker.remove();
  const cut = Number(out.dataset.end) < Number(out.dataset.bytes);
  if (tall) article.classList.add("collapsed");
  const wanted = cut || article.classList.contains("collapsed");
  let more = article.querySelector(":scope > .more");
  if (!wanted) { if (more) more.remove(); return; }
  if (!more) {
    more = document.createElement("p");
    more.className = "more";
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.showAll = article.dataset.id;
    button.textContent = "show all";
    more.append(document.createElement("span"), " ", button);
    out.after(more);
  }
  more.firstChild.textContent = cut
    ? `output cut: ${kib(out.dataset.end)} of ${kib(out.dataset.bytes)} shown`
    : "output collapsed";
}

function kib(bytes) {
  const n = Number(bytes);
  return n < 1024 ? `${n} bytes` : `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KiB`;
}

// Reads the rest of a command's output (plain text: colours are drawn for
// what the listing sent) and appends it.
async function fill(article) {
  const out = pre(article);
  if (!out || out.dataset.filling) return;
  out.dataset.filling = "1";
  try {
    while (Number(out.dataset.end) < Number(out.dataset.bytes)) {
      const [page] = await rpc("read_output", { get: true, args: {
        p_command_id: article.dataset.id, p_offset: out.dataset.end } });
      if (!page || page.next_offset <= Number(out.dataset.end)) break;
      out.append(document.createTextNode(page.output.replace(ANSI_ESCAPES, "")));
      out.dataset.end = String(page.next_offset);
      out.dataset.bytes = String(Math.max(page.output_bytes, Number(out.dataset.bytes)));
    }
  } catch (error) {
    fail(error);
  } finally {
    delete out.dataset.filling;
    fitOutput(article);
  }
}

const ANSI_ESCAPES = /\x1b(\[[0-9;?]*[ -\/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)?/g;

function outputText(article) {
  const out = pre(article);
  return out ? out.textContent : "";
}

// Screen readers hear the output that arrived, once: the scrollback itself
// is not a live region (updating a command would read it all again).
function announce(text) {
  const region = $("#announce");
  if (region) region.textContent = text.length > 500 ? "…" + text.slice(-500) : text;
}

// input.js keeps the prompt's directory and cleared commands in step with
// the articles it sees arrive; an update in place arrives as no new article.
function afterInPlaceUpdate() {
  if (typeof screen !== "undefined" && typeof screen.hideCleared === "function") screen.hideCleared();
  if (typeof showPromptCwd === "function") showPromptCwd();
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
  const button = event.target.closest("#load-earlier, button[data-show-all]");
  if (!button) return;
  button.disabled = true;
  try {
    if (button.id === "load-earlier") {
      await terminal.loadEarlier();
      return;
    }
    const article = button.closest("article.cmd");
    article.classList.remove("collapsed");
    article.dataset.expanded = "1";
    await fill(article);
    fitOutput(article);
  } catch (error) {
    fail(error);
  } finally {
    button.disabled = false;
  }
});

// htmx appends the submitted command's fragment; the live loop may already
// have shown that command: the copy already there is kept, brought up to date.
function dedupe(box) {
  const seen = new Map();
  for (const article of [...box.querySelectorAll("article.cmd")]) {
    const first = seen.get(article.id);
    if (!first) { seen.set(article.id, article); continue; }
    updateInPlace(first, article);  // an older copy changes nothing
    article.remove();
  }
}

// ---- htmx: the token, the Accept header, errors ----------------------------

document.body.addEventListener("htmx:configRequest", (event) => {
  const input = $("#command");
  if (event.detail.elt.id === "command-form") {
    const command = event.detail.parameters.p_command;
    if (!command || !command.trim()) { event.preventDefault(); return; }
    terminal.lastSent = command;
    terminal.resetHistory();
    input.value = "";
  }
  if (token()) event.detail.headers.Authorization = `Bearer ${token()}`;
  event.detail.headers.Accept = "text/html";
});

document.body.addEventListener("htmx:afterSwap", (event) => {
  if (event.detail.target.id !== "scrollback") return;
  const box = event.detail.target;
  dedupe(box);
  box.scrollTop = box.scrollHeight;
  showStatus("");
});

document.body.addEventListener("htmx:responseError", (event) => {
  const xhr = event.detail.xhr;
  let body = null;
  try { body = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
  if (event.detail.elt.id === "command-form") {
    // Give the refused command back, so it can be fixed and sent again.
    const input = $("#command");
    if (!input.value) input.value = terminal.lastSent;
  }
  fail(new ApiError(xhr.status, body));
});

document.body.addEventListener("htmx:sendError", () => showStatus("The server cannot be reached."));

// ---- the input line: history, Ctrl-C ------------------------------------

$("#command").addEventListener("keydown", (event) => {
  const input = event.target;
  if ((event.key === "ArrowUp" && caretOnFirstLine(input))
      || (event.key === "ArrowDown" && caretOnLastLine(input))) {
    const t = terminal;
    if (t.historyIndex >= t.history.length) t.startRecall(input.value);
    if (event.key === "ArrowUp" && t.historyIndex === 0) {
      // At the oldest command loaded: ↑ goes on into the older history.
      event.preventDefault();
      const index = t.history.length;
      t.recallEarlier().then((added) => {
        if (!added) return;
        const draft = t.draft;
        t.startRecall(draft);
        t.historyIndex = t.history.length - index - 1;
        input.value = t.history[t.historyIndex];
        input.setSelectionRange(input.value.length, input.value.length);
      }).catch(fail);
      return;
    }
    if (event.key === "ArrowDown" && t.historyIndex >= t.history.length) return;
    event.preventDefault();
    t.historyIndex += event.key === "ArrowUp" ? -1 : 1;
    input.value = t.historyIndex < t.history.length ? t.history[t.historyIndex] : t.draft;
    input.setSelectionRange(input.value.length, input.value.length);
  } else if (event.ctrlKey && !event.metaKey && !event.altKey && event.key.toLowerCase() === "c") {
    // With text selected in the line, Ctrl-C copies; otherwise it is the
    // shell's interrupt: cancel the running command and clear the line.
    if (input.selectionStart !== input.selectionEnd) return;
    event.preventDefault();
    input.value = "";
    const id = terminal.activeCommand();
    if (id) cancel(id);
  }
});

async function cancel(id) {
  try {
    await rpc("cancel_command", { args: { p_command_id: Number(id) } });
  } catch (error) { fail(error); }
}

$("#scrollback").addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-cancel], button[data-fork]");
  if (!button) return;
  if (button.dataset.cancel) {
    button.disabled = true;
    cancel(button.dataset.cancel);
    return;
  }
  try {
    const id = await rpc("fork_session", { args: { p_source_command_id: Number(button.dataset.fork) } });
    showStatus(`Forked into a new session from command ${button.dataset.fork}.`, false);
    location.hash = `#session=${id}`;
  } catch (error) { fail(error); }
});

window.addEventListener("hashchange", route);
// After every deferred script has run: files.js comes after this file.
document.addEventListener("DOMContentLoaded", route);
