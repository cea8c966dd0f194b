// The secrets view (#secrets): the user's secrets by name, version and when
// each was set (secrets_html, fetched and swapped by htmx: index.html's
// #secret-list), never a value; a form that sets one, and deleting one with
// a second click to confirm, as archiving a session is.
//
// A value goes to set_secret in a POST body and nowhere else: its field is
// emptied as soon as it is read, whether or not the database takes it, so
// that it stays neither in the page nor in a field a later submit resends.
import { $, fail, rpc, showStatus } from "./api.js";
import { show, showLocalTimes } from "./views.js";

const list = $("#secret-list");
const form = $("#secret-form");

export const secrets = {
  open() {
    show("secrets-view");
    $("#where").textContent = "secrets";
    list.replaceChildren();
    form.reset();
    this.refresh();
  },

  refresh() { htmx.trigger(list, "refresh"); },
};

list.addEventListener("htmx:afterSwap", () => showLocalTimes(list));

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = form.p_name.value.trim();  // a pasted name's stray space is no part of it
  const value = form.p_value.value;
  form.p_value.value = "";
  try {
    const stored = await rpc("set_secret", { args: { p_name: name, p_value: value } });
    form.reset();
    showStatus(`Secret ${stored.name} set (version ${stored.version}): the sessions that use it get it `
      + "from their next command.", false);
    secrets.refresh();
  } catch (error) { fail(error); }
});

list.addEventListener("click", async (event) => {
  const button = event.target.closest("button.delete");
  const item = event.target.closest("li[data-name]");
  if (!button || !item) return;
  if (!button.classList.contains("confirm")) {
    // A second click confirms: a session that uses it fails its next command.
    button.classList.add("confirm");
    button.textContent = "delete: sure?";
    return;
  }
  button.disabled = true;
  try {
    await rpc("delete_secret", { args: { p_name: item.dataset.name } });
    showStatus(`Secret ${item.dataset.name} deleted: a session that still uses it fails its next command `
      + "until it is set again or the session no longer uses it.", false);
    secrets.refresh();
  } catch (error) {
    button.disabled = false;
    fail(error);
  }
});
