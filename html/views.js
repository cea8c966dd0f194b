// Which view the page shows: the sign-in form without a token, else what
// the URL's hash names (a session, a replay's comparison) or the session
// list. Links only change the hash, so Back and a copied link work.
"use strict";

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

window.addEventListener("hashchange", route);
// After every deferred script has run: the views are defined in later files.
document.addEventListener("DOMContentLoaded", route);
