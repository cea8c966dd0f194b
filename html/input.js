// The input line as a person expects it: Enter runs
// the command, Shift+Enter adds a line and a paste keeps its lines; Ctrl-U
// empties the line; Ctrl-L and a `clear` command clear the view while the
// history stays (the commands stay in the page, hidden, so ↑ still recalls
// them); the prompt shows the session's directory; a command the server
// refuses comes back to the line.
"use strict";

const MAX_ROWS = 10;

function caretOnFirstLine(input) {
  return !input.value.slice(0, input.selectionStart).includes("\n");
}

function caretOnLastLine(input) {
  return !input.value.slice(input.selectionEnd).includes("\n");
}

// The textarea grows with its lines, up to MAX_ROWS, then scrolls.
function fitInput() {
  const input = $("#command");
  input.rows = Math.min(MAX_ROWS, Math.max(1, input.value.split("\n").length));
}

const screen = {
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
function showPromptCwd(fallback) {
  const finished = [...$("#scrollback").querySelectorAll("article.cmd[data-cwd]")];
  const cwd = finished.length ? finished[finished.length - 1].dataset.cwd : fallback;
  if (cwd !== undefined && cwd !== null) $("#prompt-cwd").textContent = cwd;
}

function shortCwd(cwd) {
  if (cwd === "/home/sandbox") return "~";
  return cwd.startsWith("/home/sandbox/") ? "~" + cwd.slice("/home/sandbox".length) : cwd;
}

$("#command").addEventListener("keydown", (event) => {
  const input = event.target;
  const plainCtrl = event.ctrlKey && !event.metaKey && !event.altKey;
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    if (input.value.trim() === "clear") {
      screen.clear();
      screen.clearOnArrival = true;
    }
    input.form.requestSubmit();
  } else if (plainCtrl && event.key.toLowerCase() === "l") {
    event.preventDefault();
    screen.clear();
  } else if (plainCtrl && event.key.toLowerCase() === "u") {
    event.preventDefault();
    input.value = "";
    fitInput();
  }
});

$("#command").addEventListener("input", fitInput);

// Sending empties the line and ends a recall (an empty line is not sent);
// a command the server refused comes back, to be fixed and sent again.
let lastSent = "";

document.body.addEventListener("htmx:configRequest", (event) => {
  if (event.detail.elt.id !== "command-form") return;
  const command = event.detail.parameters.p_command;
  if (!command || !command.trim()) { event.preventDefault(); return; }
  lastSent = command;
  recall.reset();
  $("#command").value = "";
});

document.body.addEventListener("htmx:responseError", (event) => {
  if (event.detail.elt.id !== "command-form") return;
  const input = $("#command");
  if (!input.value) input.value = lastSent;
});

document.body.addEventListener("htmx:afterRequest", fitInput);

// Fragments arrive from htmx and from the live loop; whichever way, keep
// cleared commands hidden and the prompt's directory current.
new MutationObserver(() => {
  screen.hideCleared();
  showPromptCwd();
}).observe($("#scrollback"), { childList: true });

// A session opens: nothing is cleared yet, and the prompt starts at the
// session's directory until its commands say otherwise.
async function openedSession() {
  screen.reset();
  $("#prompt-cwd").textContent = "";
  $("#lineage").hidden = true;
  fitInput();
  const id = sessionFromHash();
  if (!id || !token()) return;
  try {
    const list = await rpc("list_sessions", { get: true });
    const session = list.find((s) => s.id === id);
    if (session && sessionFromHash() === id) {
      showPromptCwd(shortCwd(session.cwd));
      showLineage(session, list);
    }
  } catch (_) { /* the terminal reports errors itself */ }
}

window.addEventListener("hashchange", openedSession);
document.addEventListener("DOMContentLoaded", openedSession);
