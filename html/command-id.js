// A command's id (its "#N" button) is what fork_session, replay_session and
// the CLI take: a click copies it. Where the clipboard is refused (a page
// not served over HTTPS or localhost), the status line shows it to copy.
import { $, showStatus } from "./api.js";

$("#scrollback").addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const id = button.dataset.copy;
  try {
    await navigator.clipboard.writeText(id);
    showStatus(`Command id ${id} copied.`, false);
  } catch (_) {
    showStatus(`Command id: ${id}`, false);
  }
});
