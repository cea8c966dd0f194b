// The files panel of the open session: its files, each with a download
// button, and an upload form. terminal.js tells it when a session opens or
// closes, scrollback.js when a finished command changed files.
//
// The bytes travel as PostgREST moves them, so the page works in front of
// the embedded gateway and of plain PostgREST alike: read_file answers
// `Accept: application/octet-stream` with the raw bytes (handed to the
// browser as a Blob URL: the CSP needs nothing more), and upload_file takes
// its bytea in PostgreSQL's hex format ("\x…") inside the JSON body.
// Paths are tenant data: they reach the page through textContent only.
"use strict";

const MAX_UPLOAD = 64 * 1024 * 1024;  // upload_file refuses more (PT413): say so before reading it
const MAX_LISTED = 1000;               // entries the panel reads: session_files' page (its most)
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

const files = {
  sessionId: null,
  generation: 0,    // bumps on every open/close so a stale answer is dropped
  loading: null,    // the listing being read, if any
  again: false,     // something changed while it was read: read once more

  open(id) {
    this.close();
    this.sessionId = id;
    $("#files-toggle").hidden = false;
    $("#files-list").replaceChildren();
    $("#upload-form").reset();
    $("#files-note").textContent = "";
    this.say("");
    if (this.visible()) this.load();
  },

  close() {
    this.generation += 1;
    this.sessionId = null;
    $("#files-toggle").hidden = true;
  },

  visible() { return !$("#files-panel").hidden; },

  toggle() {
    const panel = $("#files-panel");
    panel.hidden = !panel.hidden;
    $("#files-toggle").setAttribute("aria-expanded", String(!panel.hidden));
    if (!panel.hidden) this.load();
  },

  // A command finished that changed files: a hidden panel reads them when shown.
  changed() { if (this.visible()) this.load(); },

  // One listing at a time; asks made meanwhile are folded into one more read.
  load() {
    if (this.loading) {
      this.again = true;
      return this.loading;
    }
    this.loading = (async () => {
      do {
        this.again = false;
        await this.read();
      } while (this.again);
    })().finally(() => { this.loading = null; });
    return this.loading;
  },

  async read() {
    const { sessionId, generation } = this;
    if (!sessionId) return;
    try {
      // One page: a call costs what it returns, whatever the tree holds.
      const list = await rpc("session_files", { get: true, args: { p_session_id: sessionId, p_limit: MAX_LISTED } });
      if (generation === this.generation) this.render(list);
    } catch (error) {
      if (generation === this.generation) this.failed(error);
    }
  },

  render(list) {
    const shown = list.filter((f) => f.kind !== "dir");
    const rows = document.createDocumentFragment();
    for (const f of shown) rows.append(fileRow(f));
    $("#files-list").replaceChildren(rows);
    $("#files-note").textContent = !shown.length && list.length < MAX_LISTED ? "No files yet."
      : list.length >= MAX_LISTED ? `The first ${shown.length} files are shown; there are more.` : "";
  },

  async download(path) {
    try {
      const blob = await rpc("read_file", { bytes: true, args: { p_session_id: this.sessionId, p_path: path } });
      const url = URL.createObjectURL(blob);
      const link = document.createElement("a");
      link.href = url;
      link.download = path.split("/").pop();
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      this.say("");
    } catch (error) { this.failed(error); }
  },

  async upload(form) {
    const file = form.file.files[0];
    const sessionId = this.sessionId;  // the session shown when the button was pressed
    if (!file || !sessionId) return;
    let path = form.path.value.trim() || file.name;
    if (path.endsWith("/")) path += file.name;  // a directory: keep the file's name
    if (file.size > MAX_UPLOAD) {
      this.say(`${file.name} is too large: an upload may be at most 64 MiB.`, true);
      return;
    }
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    this.say(`Uploading ${path}…`);
    try {
      const content = "\\x" + hex(new Uint8Array(await file.arrayBuffer()));
      await rpc("upload_file", { args: { p_session_id: sessionId, p_path: path, p_content: content } });
      form.reset();
      this.say(`Uploaded ${path}.`);
      await this.load();
    } catch (error) {
      this.failed(error);
    } finally {
      button.disabled = false;
    }
  },

  failed(error) {
    if (error.status === 401) fail(error);  // signed out: fail asks to sign in again
    else this.say(error.message, true);
  },

  // The panel's message line: what an upload did, or an error (message — hint).
  say(text, isError = false) {
    const line = $("#files-message");
    line.textContent = text;
    line.classList.toggle("error", Boolean(text) && isError);
  },
};

function fileRow(f) {
  const tr = document.createElement("tr");
  const cell = (text, className) => {
    const td = document.createElement("td");
    td.className = className;
    td.textContent = text;
    tr.append(td);
    return td;
  };
  cell(f.kind === "symlink" ? `${f.path} → ${f.target}` : f.path, "path");
  cell(f.kind === "file" ? formatSize(f.size) : "link", "size").title = `${f.size} bytes`;
  cell(f.mode.toString(8).padStart(3, "0"), "mode");
  const action = cell("", "action");
  if (f.kind === "file") {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "link";
    button.textContent = "download";
    button.dataset.download = f.path;
    button.setAttribute("aria-label", `download ${f.path}`);
    action.append(button);
  }
  return tr;
}

function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

// Bytes as PostgreSQL's hex format wants them (without the leading \x).
function hex(bytes) {
  const parts = [];
  for (let start = 0; start < bytes.length; start += 65536) {
    let part = "";
    for (let i = start; i < Math.min(bytes.length, start + 65536); i += 1) part += HEX[bytes[i]];
    parts.push(part);
  }
  return parts.join("");
}

$("#files-toggle").addEventListener("click", () => files.toggle());

$("#files-list").addEventListener("click", (event) => {
  const button = event.target.closest("button[data-download]");
  if (button) files.download(button.dataset.download);
});

$("#upload-form").addEventListener("submit", (event) => {
  event.preventDefault();
  files.upload(event.target);
});
