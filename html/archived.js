// An archived session opened at its link reads as any other (history,
// files, lineage); the line above it (session_lineage_html) says since when
// and offers "restore" (unarchive_session). Until then the prompt takes
// nothing: the server would answer PT409.
import { $, fail, rpc, showStatus } from "./api.js";

const lineage = $("#lineage");
const input = $("#command");
const TYPING = input.placeholder;

lineage.addEventListener("htmx:afterSwap", () => {
  const archived = lineage.querySelector(".archived") !== null;
  input.disabled = archived;
  input.placeholder = archived ? "archived: restore it to run commands" : TYPING;
});

lineage.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-unarchive]");
  if (!button) return;
  button.disabled = true;
  try {
    await rpc("unarchive_session", { args: { p_session_id: button.dataset.unarchive } });
    showStatus("Session restored: it takes commands again and counts toward your quota.", false);
    htmx.trigger(lineage, "refresh");
  } catch (error) {
    button.disabled = false;
    fail(error);
  }
});
