// Opens the view the page is at: the sign-in form without a token, else
// what the URL's hash names (a session, a replay's comparison, the
// secrets) or the session list; again whenever the hash changes or the
// token goes.
import { $, onSignedOut } from "./api.js";
import { comparison } from "./replay.js";
import { secrets } from "./secrets.js";
import { sessions } from "./sessions.js";
import { terminal } from "./terminal.js";
import { token } from "./token.js";
import { replayFromHash, secretsInHash, sessionFromHash, show } from "./views.js";

export function route() {
  terminal.close();
  comparison.close();
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
  else if (secretsInHash()) secrets.open();
  else sessions.open();
}

onSignedOut(route);
window.addEventListener("hashchange", route);
