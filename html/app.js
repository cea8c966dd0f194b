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

const terminal = {
  sessionId: null,
  cursor: 0,          // the largest data-change seen: the change feed resumes there
  generation: 0,      // bumps on every open/close so a stale loop stops
  abort: null,
  history: [],        // while recalling: the commands shown, oldest first
  historyIndex: 0,
  draft: "",
  lastSent: "",

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
        args: { p_session_id: id, p_since_id: 0, p_limit: 100 } });
      if (generation !== this.generation) return;
      this.apply(html, true);
      this.follow(generation);
    } catch (error) {
      if (generation === this.generation) fail(error);
    }
  },

  // The long-poll loop: the gateway holds the request until something
  // changes; plain PostgREST answers at once, so an empty quick answer waits
  // a little before asking again.
  async follow(generation) {
    let failures = 0;
    while (generation === this.generation) {
      this.abort = new AbortController();
      const started = performance.now();
      try {
        const html = await rpc("session_changes_html", {
          get: true, html: true, signal: this.abort.signal, headers: { Prefer: "wait=20" },
          args: { p_session_id: this.sessionId, p_after_change: this.cursor } });
        if (generation !== this.generation) return;
        failures = 0;
        if (html.trim()) this.apply(html);
        else if (performance.now() - started < 1000) await sleep(500);
      } catch (error) {
        if (generation !== this.generation || error.name === "AbortError") return;
        fail(error);
        if (error.status === 401 || error.status === 400 || error.status === 403) return;
        failures += 1;
        await sleep(Math.min(10000, 500 * 2 ** failures));
      }
    }
  },

  // Puts fragments into the scrollback: a known command is replaced in
  // place, a new one goes in id order. Keeps the view pinned to the bottom
  // if it was there. A finished command that changed files (it carries a
  // summary of its changes) has the files panel read them again.
  apply(html, initial = false) {
    const box = $("#scrollback");
    const pinned = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    const template = document.createElement("template");
    template.innerHTML = html;
    let filesChanged = false;
    for (const article of template.content.querySelectorAll("article.cmd")) {
      this.cursor = Math.max(this.cursor, Number(article.dataset.change) || 0);
      filesChanged ||= article.querySelector(":scope > details.changes") !== null;
      upsert(box, article);
    }
    if (pinned) box.scrollTop = box.scrollHeight;
    if (filesChanged && !initial) files.changed();
  },

  // History is what the scrollback shows (uploads are not commands to run
  // again), so it survives a reload and never disagrees with the page; it
  // is read when a recall starts.
  resetHistory() {
    this.history = [];
    this.historyIndex = 0;
    this.draft = "";
  },

  startRecall(draft) {
    this.history = [...$("#scrollback").querySelectorAll("article.cmd:not(.upload) .text")]
      .map((t) => t.textContent);
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

function upsert(box, article) {
  const existing = box.querySelector(`#${CSS.escape(article.id)}`);
  if (existing) {
    if (Number(existing.dataset.change) <= Number(article.dataset.change)) existing.replaceWith(article);
    return;
  }
  const id = Number(article.dataset.id);
  const after = [...box.querySelectorAll("article.cmd")].find((a) => Number(a.dataset.id) > id);
  box.insertBefore(article, after || null);
}

// htmx appends the submitted command's fragment; the live loop may already
// have shown that command, so keep only the newest copy.
function dedupe(box) {
  const seen = new Map();
  for (const article of box.querySelectorAll("article.cmd")) {
    const other = seen.get(article.id);
    if (!other) { seen.set(article.id, article); continue; }
    const keep = Number(article.dataset.change) >= Number(other.dataset.change) ? article : other;
    const drop = keep === article ? other : article;
    if (keep === article) other.replaceWith(article); else drop.remove();
    seen.set(article.id, keep);
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
    if (event.key === "ArrowUp" && t.historyIndex === 0) return;
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
