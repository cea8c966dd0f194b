// The session list (sessions_html, fetched and swapped by htmx: index.html's
// #session-list): each session with where it came from and what came from
// it, linked both ways. Here: rename in place, archive with a second click
// to confirm, a new session (on a template the picker offers, with the
// secrets ticked below it), and each "last active" in the reader's time.
import { $, fail, rpc, showStatus } from "./api.js";
import { checkedSecrets } from "./session-secrets.js";
import { show, showLocalTimes } from "./views.js";

const list = $("#session-list");

export const sessions = {
  // The list shown on the last visit goes at once: it would take clicks
  // (rename, archive) that the fresh list then wipes out.
  open() {
    show("sessions-view");
    $("#where").textContent = "sessions";
    list.replaceChildren();
    this.refresh();
    htmx.trigger($("#template-picker"), "refresh");
    htmx.trigger($("#new-session-secrets"), "refresh");
  },

  refresh() { htmx.trigger(list, "refresh"); },
};

list.addEventListener("htmx:afterSwap", () => showLocalTimes(list));

$("#new-session-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = event.target.p_name.value.trim();
  const template = event.target.p_template.value;
  const secrets = checkedSecrets(event.target);
  const args = {};
  if (name) args.p_name = name;
  if (template && template !== "base") args.p_template = template;
  if (secrets.length) args.p_secrets = secrets;
  try {
    const id = await rpc("create_session", { args });
    event.target.reset();
    location.hash = `#session=${id}`;
  } catch (error) { fail(error); }
});

// The name becomes a form with its current text (a rename's save or cancel
// reads the list again).
function renameForm(li) {
  const name = li.querySelector("a.name");
  const input = document.createElement("input");
  Object.assign(input, { name: "p_name", value: name.textContent, maxLength: 200, required: true });
  input.setAttribute("aria-label", "new session name");
  const save = document.createElement("button");
  Object.assign(save, { type: "submit", textContent: "save" });
  const cancel = document.createElement("button");
  Object.assign(cancel, { type: "button", className: "cancel-rename", textContent: "cancel" });
  const form = document.createElement("form");
  form.className = "rename-form";
  form.append(input, save, cancel);
  name.replaceWith(form);
  input.select();
}

list.addEventListener("click", async (event) => {
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

list.addEventListener("submit", async (event) => {
  event.preventDefault();
  const li = event.target.closest("li[data-id]");
  try {
    await rpc("rename_session", { args: { p_session_id: li.dataset.id, p_name: event.target.p_name.value } });
    showStatus("");
    sessions.refresh();
  } catch (error) { fail(error); }
});
