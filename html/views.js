// Which view the page shows, and what the URL's hash names: a session
// (#session=<id>), a replay's comparison (#replay=<id>) or the secrets
// (#secrets). Links only change the hash, so Back and a copied link work;
// router.js acts on it.
import { $ } from "./api.js";

const VIEWS = ["login-view", "sessions-view", "secrets-view", "terminal-view", "compare-view"];

export function show(view) {
  for (const id of VIEWS) $("#" + id).hidden = id !== view;
  $("#logout").hidden = view === "login-view";
  $("#secrets-link").hidden = view === "login-view";
  document.body.dataset.view = view;
}

export function sessionFromHash() {
  const match = /^#session=([0-9a-f-]{36})$/i.exec(location.hash);
  return match ? match[1].toLowerCase() : null;
}

export function replayFromHash() {
  const match = /^#replay=([0-9a-f-]{36})$/i.exec(location.hash);
  return match ? match[1].toLowerCase() : null;
}

export function secretsInHash() { return location.hash === "#secrets"; }

// The server writes times in UTC (it cannot know the reader's zone): each
// <time datetime> in the list, in the reader's.
export function showLocalTimes(list) {
  for (const time of list.querySelectorAll("time[datetime]")) {
    time.textContent = new Date(time.dateTime).toLocaleString();
  }
}
