// "fork from here" on a command: a new session that starts from the state
// right after it (its directory, environment and files), opened at once.
import { $, fail, rpc, showStatus } from "./api.js";

$("#scrollback").addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-fork]");
  if (!button) return;
  try {
    const id = await rpc("fork_session", { args: { p_source_command_id: Number(button.dataset.fork) } });
    showStatus(`Forked into a new session from command ${button.dataset.fork}.`, false);
    location.hash = `#session=${id}`;
  } catch (error) { fail(error); }
});
