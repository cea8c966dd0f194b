// A running command in the page: its elapsed time against the time limit,
// counted here from the start the server sent (data-started, data-limit),
// and the ways to stop it: a stop control by the input line that is there,
// on a phone too, whenever a command of the session is unfinished, its own
// cancel button, and Ctrl-C on the input line.
import { $, fail, rpc } from "./api.js";
import { terminal } from "./terminal.js";

function elapsedWords(article) {
  const seconds = Math.max(0, Math.floor((Date.now() - Number(article.dataset.started)) / 1000));
  // A terminal command (drawn in a .tty-view, html/tty/) has no batch time
  // limit: it ends when idle too long or at its tenant's longest run.
  const limit = article.querySelector(":scope > .tty-view") ? null : article.dataset.limit;
  return limit ? `running · ${seconds} s of the ${limit} s time limit` : `running · ${seconds} s`;
}

function tickRunning() {
  for (const article of $("#scrollback").querySelectorAll('article.cmd[data-status="running"][data-started]')) {
    const meta = article.querySelector(":scope > .meta");
    if (meta) meta.textContent = elapsedWords(article);
  }
  $("#stop").hidden = !terminal.activeCommand();
}

setInterval(tickRunning, 1000);
new MutationObserver(tickRunning).observe($("#scrollback"), { childList: true });

$("#stop").addEventListener("click", () => {
  const id = terminal.activeCommand();
  if (id) cancel(id);
});

async function cancel(id) {
  try {
    await rpc("cancel_command", { args: { p_command_id: Number(id) } });
  } catch (error) { fail(error); }
}

$("#scrollback").addEventListener("click", (event) => {
  const button = event.target.closest("button[data-cancel]");
  if (!button) return;
  button.disabled = true;
  cancel(button.dataset.cancel);
});

$("#command").addEventListener("keydown", (event) => {
  if (!(event.ctrlKey && !event.metaKey && !event.altKey && event.key.toLowerCase() === "c")) return;
  // With text selected in the line, Ctrl-C copies; otherwise it is the
  // shell's interrupt: cancel the running command and clear the line.
  const input = event.target;
  if (input.selectionStart !== input.selectionEnd) return;
  event.preventDefault();
  input.value = "";
  const id = terminal.activeCommand();
  if (id) cancel(id);
});
