// Replay: "replay from here" on a command re-runs the
// session's commands from it in a new session, and the comparison view
// shows each replayed command beside its original (shell_api.
// replay_comparison): exit codes and outputs, differences highlighted. It
// reads again every second until every replayed command has finished.
"use strict";

const FINISHED_STATUSES = new Set(["done", "failed", "cancelled"]);

function replayFromHash() {
  const match = /^#replay=([0-9a-f-]{36})$/i.exec(location.hash);
  return match ? match[1].toLowerCase() : null;
}

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

const comparison = {
  generation: 0,

  async open(runId) {
    const generation = ++this.generation;
    show("compare-view");
    $("#where").textContent = "replay";
    $("#compare-rows").replaceChildren();
    $("#compare-summary").textContent = "";
    this.title(runId);
    while (generation === this.generation && replayFromHash() === runId) {
      try {
        const rows = await rpc("replay_comparison", { get: true, args: { p_run_id: runId } });
        if (generation !== this.generation) return;
        this.render(rows);
        if (rows.every((r) => FINISHED_STATUSES.has(r.replay_status))) return;
      } catch (error) { fail(error); return; }
      await sleep(1000);
    }
  },

  async title(runId) {
    try {
      const list = await rpc("list_sessions", { get: true });
      const run = list.find((s) => s.id === runId);
      if (!run) return;
      const byId = new Map(list.map((x) => [x.id, x]));
      $("#compare-title").replaceChildren("Replay ",
        el("a", { href: `#session=${run.id}`, textContent: run.name || run.id }), " beside the original ",
        sessionLink(run.replay_of_session_id, byId));
    } catch (_) { /* the rows report errors */ }
  },

  render(rows) {
    const same = rows.filter((r) => sameResult(r)).length;
    const running = rows.filter((r) => !FINISHED_STATUSES.has(r.replay_status)).length;
    $("#compare-summary").textContent = `${same} of ${rows.length} commands gave the same result`
      + (running ? ` · ${running} still to run` : "");
    $("#compare-rows").replaceChildren(...rows.map(compareRow));
  },
};

function sameResult(r) {
  return r.original_exit_code === r.replay_exit_code && r.original_output === r.replay_output;
}

function side(label, status, exitCode, output, other) {
  const exit = el("span", { className: "exit", textContent: exitCode === null ? status : `exit ${exitCode}` });
  const out = el("pre", { className: "out", textContent: output || "" });
  if (exitCode !== other.exitCode) exit.classList.add("differs");
  if ((output || "") !== (other.output || "")) out.classList.add("differs");
  return el("div", { className: "side" }, el("span", { className: "label", textContent: label }), " ", exit, out);
}

function compareRow(r) {
  const finished = FINISHED_STATUSES.has(r.replay_status);
  const original = side("original", r.original_status, r.original_exit_code, r.original_output,
    finished ? { exitCode: r.replay_exit_code, output: r.replay_output }
      : { exitCode: r.original_exit_code, output: r.original_output });
  const replay = finished
    ? side("replay", r.replay_status, r.replay_exit_code, r.replay_output,
      { exitCode: r.original_exit_code, output: r.original_output })
    : el("div", { className: "side" }, el("span", { className: "label", textContent: "replay" }), ` ${r.replay_status}…`);
  const row = el("article", { className: "compare-row" },
    el("div", { className: "command", textContent: "$ " + r.command }), original, replay);
  row.dataset.same = String(finished && sameResult(r));
  return row;
}
