// The one place the terminal modules reach the page's older scripts. Those
// (api.js, terminal.js, scrollback.js) are plain scripts sharing their names
// in the global scope; issue 22 turns them into modules, and then these
// become imports. Until then only the names below are used, read when
// called (the modules run after every deferred script).
/* global rpc, fail, showStatus, terminal, insertInOrder */

// One /rpc call (api.js's rpc: the token, JSON in and out, ApiError).
export function call(name, options) {
  return rpc(name, options);
}

// An error on the status line (a 401 signs out), as the rest of the page does.
export function report(error) {
  fail(error);
}

export function clearStatus() {
  showStatus("");
}

// The session the page shows, or null.
export function openSessionId() {
  return terminal.sessionId;
}

// Puts a command's article into the scrollback in id order, as the live
// feed's fragments are put (without moving the feed's cursor).
export function placeArticle(article) {
  insertInOrder(document.querySelector("#scrollback"), article);
}
