// The files panel of the open session: its listing (session_files_html,
// fetched and swapped by htmx: index.html's #files-listing), each file with
// a download button, and an upload form. terminal.js tells it when a
// session opens or closes, scrollback.js when a finished command changed
// files.
//
// The bytes travel as PostgREST moves them, so the page works in front of
// the embedded gateway and of plain PostgREST alike: read_file answers
// `Accept: application/octet-stream` with the raw bytes (handed to the
// browser as a Blob URL: the CSP needs nothing more), and upload_file takes
// its bytea in PostgreSQL's hex format ("\x…") inside the JSON body: htmx
// sends neither, so these two are fetch's.
import { $, fail, htmxError, rpc } from "./api.js";

const MAX_UPLOAD = 64 * 1024 * 1024;  // upload_file refuses more (PT413): say so before reading it
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));
const listing = $("#files-listing");

export const files = {
  sessionId: null,

  open(id) {
    this.close();
    this.sessionId = id;
    $("#files-toggle").hidden = false;
    listing.replaceChildren();
    $("#upload-form").reset();
    this.say("");
    if (this.visible()) this.load();
  },

  close() {
    this.sessionId = null;
    htmx.trigger(listing, "htmx:abort");  // a listing still on its way is another session's
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

  // The listing of the session in #session-id; a read already under way is
  // replaced by this one (hx-sync).
  load() { htmx.trigger(listing, "refresh"); },

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
      if (sessionId === this.sessionId) this.load();
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

// The listing's errors go on the panel's message line (api.js leaves them
// to it); a 401 still signs out.
listing.addEventListener("htmx:responseError", (event) => {
  const error = htmxError(event);
  if (error.status === 401) return;
  event.preventDefault();
  files.say(error.message, true);
});

$("#files-toggle").addEventListener("click", () => files.toggle());

listing.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-download]");
  if (button) files.download(button.dataset.download);
});

$("#upload-form").addEventListener("submit", (event) => {
  event.preventDefault();
  files.upload(event.target);
});
