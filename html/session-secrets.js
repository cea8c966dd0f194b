// Which of the user's secrets the open session's commands get: the line
// above the session (index.html's #session-secrets) names the ones it uses
// now and opens into a checkbox a secret (secret_choices_html for the
// session in #session-id), saved with set_session_secrets. The line is not
// shown while there is nothing to choose (app.css). terminal.js opens it
// with the session.
import { $, fail, rpc, showStatus } from "./api.js";

const panel = $("#session-secrets");
const choices = $("#session-secret-choices");

export const sessionSecrets = {
  open() {
    panel.open = false;
    choices.replaceChildren();
    summarise();
    htmx.trigger(choices, "refresh");
  },
};

// The names checked among a list of secret_choices_html's checkboxes.
export function checkedSecrets(list) {
  return [...list.querySelectorAll("input[name=p_secrets]:checked")].map((box) => box.value);
}

// The summary says what the server said the session uses (it is read after
// each load, not as boxes are ticked).
function summarise() {
  const names = [...choices.querySelectorAll("input[name=p_secrets]:checked")].map((box) =>
    box.closest(".unset") ? `${box.value} (not set)` : box.value);
  $("#session-secrets-summary").textContent = names.length ? names.join(", ") : "none";
}

choices.addEventListener("htmx:afterSwap", summarise);

$("#session-secrets-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    const kept = await rpc("set_session_secrets", { args: {
      p_session_id: $("#session-id").value, p_secrets: checkedSecrets(choices) } });
    showStatus(kept.length ? `This session's next commands get ${kept.join(", ")}.`
      : "This session's next commands get no secrets.", false);
    panel.open = false;
    htmx.trigger(choices, "refresh");
  } catch (error) { fail(error); }
});
