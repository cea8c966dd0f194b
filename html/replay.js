// Replay: "replay from here" on a command re-runs the session's commands
// from it in a new session, and the comparison view shows each replayed
// command beside its original (replay_comparison_html, fetched and swapped
// by htmx: index.html's #compare): exit codes and outputs, differences
// marked. It is read again every second until every replayed command has
// finished (the rows' data-running is 0).
import { $, fail, rpc, showStatus } from "./api.js";
import { terminal } from "./terminal.js";
import { replayFromHash, show } from "./views.js";

const view = $("#compare");
const AGAIN_MS = 1000;

$("#scrollback").addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-replay]");
  if (!button) return;
  button.disabled = true;
  try {
    const run = await rpc("replay_session", { args: {
      p_session_id: terminal.sessionId, p_start_id: Number(button.dataset.replay) } });
    showStatus(`Replaying from command ${button.dataset.replay}.`, false);
    location.hash = `#replay=${run}`;
  } catch (error) {
    button.disabled = false;
    fail(error);
  }
});

export const comparison = {
  runId: null,
  timer: 0,

  open(runId) {
    this.close();
    this.runId = runId;
    show("compare-view");
    $("#where").textContent = "replay";
    $("#compare-run").value = runId;
    view.replaceChildren();
    htmx.trigger(view, "refresh");
  },

  close() {
    this.runId = null;
    clearTimeout(this.timer);
    htmx.trigger(view, "htmx:abort");
  },
};

// Read again while replayed commands are still to finish, as long as the
// page shows this run.
view.addEventListener("htmx:afterSwap", () => {
  const rows = view.querySelector("#compare-rows");
  const runId = comparison.runId;
  if (!rows || rows.dataset.running === "0" || !runId) return;
  clearTimeout(comparison.timer);
  comparison.timer = setTimeout(() => {
    if (comparison.runId === runId && replayFromHash() === runId) htmx.trigger(view, "refresh");
  }, AGAIN_MS);
});
