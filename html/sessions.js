// The session list: each session with where it came from (a fork of a
// session at a command, a replay of a session) and what came from it,
// linked both ways; rename in place; archive with a second click to
// confirm; a new session. And the same lineage above an open terminal.
"use strict";

const sessions = {
  // The list shown on the last visit goes at once: it would take clicks
  // (rename, archive) that the fresh list then wipes out.
  open() {
    show("sessions-view");
    $("#where").textContent = "sessions";
    $("#session-list").replaceChildren();
    return this.refresh();
  },

  async refresh() {
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

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  node.append(...children);
  return node;
}

function sessionLink(session, byId) {
  const target = byId.get(session);
  if (!target) return el("span", { className: "gone", textContent: "an archived session" });
  return el("a", { href: `#session=${target.id}`, textContent: target.name || target.id });
}

// "fork of X at command N", "replay of X · compare", and the forks and
// replays taken from this session.
function lineageParts(s, list) {
  const byId = new Map(list.map((x) => [x.id, x]));
  const parts = [];
  if (s.forked_from_session_id) {
    parts.push(el("span", { className: "origin" }, "fork of ", sessionLink(s.forked_from_session_id, byId),
      ` at command ${s.forked_from_command_id}`));
  }
  if (s.replay_of_session_id) {
    parts.push(el("span", { className: "origin" }, "replay of ", sessionLink(s.replay_of_session_id, byId),
      " · ", el("a", { href: `#replay=${s.id}`, textContent: "compare" })));
  }
  const forks = list.filter((x) => x.forked_from_session_id === s.id);
  const replays = list.filter((x) => x.replay_of_session_id === s.id);
  if (forks.length) {
    parts.push(el("span", { className: "children" }, "forks: ",
      ...forks.flatMap((f, i) => [i ? ", " : "", sessionLink(f.id, byId)])));
  }
  if (replays.length) {
    parts.push(el("span", { className: "children" }, "replays: ",
      ...replays.flatMap((r, i) => [i ? ", " : "", sessionLink(r.id, byId), " (",
        el("a", { href: `#replay=${r.id}`, textContent: "compare" }), ")"])));
  }
  return parts;
}

function sessionItems(list) {
  return list.map((s) => {
    const link = el("a", { href: `#session=${s.id}`, className: "name", textContent: s.name || s.id });
    const info = el("span", { className: "info",
      textContent: `${s.cwd} · ${new Date(s.last_active_at).toLocaleString()}` });
    const actions = el("span", { className: "actions" },
      el("button", { type: "button", className: "rename", textContent: "rename" }),
      el("button", { type: "button", className: "archive", textContent: "archive" }));
    const li = el("li", {}, link, info, ...lineageParts(s, list), actions);
    li.dataset.id = s.id;
    return li;
  });
}

function renameForm(li) {
  const current = li.querySelector("a.name").textContent;
  const input = el("input", { name: "p_name", value: current, maxLength: 200, required: true });
  input.setAttribute("aria-label", "new session name");
  const form = el("form", { className: "rename-form" }, input,
    el("button", { type: "submit", textContent: "save" }),
    el("button", { type: "button", className: "cancel-rename", textContent: "cancel" }));
  li.querySelector("a.name").replaceWith(form);
  input.select();
}

$("#session-list").addEventListener("click", async (event) => {
  const li = event.target.closest("li[data-id]");
  if (!li) return;
  if (event.target.matches("button.rename")) renameForm(li);
  else if (event.target.matches("button.cancel-rename")) sessions.refresh();
  else if (event.target.matches("button.archive")) {
    const button = event.target;
    if (!button.classList.contains("confirm")) {
      // A second click confirms: the session leaves the list for good.
      button.classList.add("confirm");
      button.textContent = "archive: sure?";
      return;
    }
    try {
      await rpc("archive_session", { args: { p_session_id: li.dataset.id } });
      showStatus("Session archived: its history is kept, and it no longer counts toward your quota.", false);
      sessions.refresh();
    } catch (error) { fail(error); }
  }
});

$("#session-list").addEventListener("submit", async (event) => {
  event.preventDefault();
  const li = event.target.closest("li[data-id]");
  try {
    await rpc("rename_session", { args: { p_session_id: li.dataset.id, p_name: event.target.p_name.value } });
    showStatus("");
    sessions.refresh();
  } catch (error) { fail(error); }
});

function showLineage(session, list) {
  const nav = $("#lineage");
  const parts = lineageParts(session, list);
  nav.replaceChildren(...parts.flatMap((p, i) => (i ? [" · ", p] : [p])));
  nav.hidden = parts.length === 0;
}
