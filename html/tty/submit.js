// Commands typed at the prompt run on a terminal (submit_command with
// p_tty, the window the terminal element has), unless the "tty" switch by
// the prompt is off: then the form goes as before (htmx, submit_command_html)
// and the output comes as HTML fragments. The switch is remembered per
// origin, like the sign-in.
import { $, fail, rpc, showStatus } from "../api.js";
// input.js's htmx:configRequest handler (an empty line refused, a recall
// ended, the line emptied) is registered first, so it runs before this one.
import "../input.js";
import { insertInOrder } from "../scrollback.js";
import { terminal } from "../terminal.js";
import { adopt, drop, stage } from "./views.js";

const MODE_KEY = "pg_shell.tty";
const toggle = document.querySelector("#tty-mode");
const input = document.querySelector("#command");

export function terminalMode() {
  return localStorage.getItem(MODE_KEY) !== "off";
}

function showMode() {
  toggle.setAttribute("aria-pressed", String(terminalMode()));
}

toggle.addEventListener("click", () => {
  localStorage.setItem(MODE_KEY, terminalMode() ? "off" : "on");
  showMode();
  input.focus();
});
window.addEventListener("storage", (event) => { if (event.key === MODE_KEY) showMode(); });
window.addEventListener("hashchange", showMode);
showMode();

// input.js's handler has already refused an empty line, ended any recall
// and emptied the line; this one takes the request from htmx when the
// command is to run on a terminal.
document.body.addEventListener("htmx:configRequest", (event) => {
  if (event.detail.elt.id !== "command-form" || event.defaultPrevented || !terminalMode()) return;
  event.preventDefault();
  const { p_session_id: sessionId, p_command: command } = event.detail.parameters;
  runOnTerminal(String(sessionId), String(command));
});

async function runOnTerminal(sessionId, command) {
  // input.js fits the line's height on input events; the line was emptied.
  input.dispatchEvent(new Event("input"));
  const view = stage();
  let id;
  try {
    id = await rpc("submit_command", { args: {
      p_session_id: sessionId, p_command: command, p_tty: true, p_cols: view.cols, p_rows: view.rows } });
  } catch (error) {
    drop(view);
    // Refused (a limit, the session gone): the command comes back to the line.
    if (!input.value) input.value = command;
    input.dispatchEvent(new Event("input"));
    input.focus();
    fail(error);
    return;
  }
  showStatus("");
  adopt(String(id), view);
  if (document.getElementById(`cmd-${id}`)) return;
  // Its article now, as htmx's answer brings a plain command's (the live
  // feed would bring it too, a moment later).
  try {
    const html = await rpc("latest_output_html", { get: true, html: true, args: {
      p_session_id: sessionId, p_since_id: id - 1, p_limit: 1 } });
    const template = document.createElement("template");
    template.innerHTML = html;
    const article = template.content.querySelector("article.cmd");
    if (article && article.id === `cmd-${id}` && !document.getElementById(article.id)
        && terminal.sessionId === sessionId) {
      insertInOrder($("#scrollback"), article);
    }
  } catch (_) { /* the live feed brings it */ }
}
