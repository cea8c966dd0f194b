// The input line as a person expects it: Enter runs the command (htmx posts
// the form to submit_command_html, or tty/submit.js runs it on a terminal),
// Shift+Enter adds a line and a paste keeps its lines; ↑ and ↓ recall
// history (recall.js); Ctrl-U empties the line; Ctrl-L and a `clear`
// command clear the view (screen.js); a command the server refuses comes
// back to the line.
import { $, fail } from "./api.js";
import { recall } from "./recall.js";
import { fitInput, screen, showPromptCwd } from "./screen.js";
import { terminal } from "./terminal.js";

function caretOnFirstLine(input) {
  return !input.value.slice(0, input.selectionStart).includes("\n");
}

function caretOnLastLine(input) {
  return !input.value.slice(input.selectionEnd).includes("\n");
}

function showRecalled(input, text) {
  input.value = text;
  input.setSelectionRange(input.value.length, input.value.length);
}

$("#command").addEventListener("keydown", (event) => {
  const input = event.target;
  const up = event.key === "ArrowUp" && caretOnFirstLine(input);
  const down = event.key === "ArrowDown" && caretOnLastLine(input);
  if (!up && !down) return;
  const r = recall;
  if (r.index >= r.history.length) r.start(input.value);
  if (up && r.index === 0) {
    // At the oldest command loaded: ↑ goes on into the older history.
    event.preventDefault();
    const index = r.history.length;
    r.fetchEarlier(terminal).then((added) => {
      if (!added) return;
      r.start(r.draft);
      r.index = r.history.length - index - 1;
      showRecalled(input, r.history[r.index]);
    }).catch(fail);
    return;
  }
  if (down && r.index >= r.history.length) return;
  event.preventDefault();
  r.index += up ? -1 : 1;
  showRecalled(input, r.index < r.history.length ? r.history[r.index] : r.draft);
});

$("#command").addEventListener("keydown", (event) => {
  const input = event.target;
  const plainCtrl = event.ctrlKey && !event.metaKey && !event.altKey;
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    if (input.value.trim() === "clear") {
      screen.clear();
      screen.clearOnArrival = true;
    }
    input.form.requestSubmit();
  } else if (plainCtrl && event.key.toLowerCase() === "l") {
    event.preventDefault();
    screen.clear();
  } else if (plainCtrl && event.key.toLowerCase() === "u") {
    event.preventDefault();
    input.value = "";
    fitInput();
  }
});

$("#command").addEventListener("input", fitInput);

// Sending empties the line and ends a recall (an empty line is not sent);
// a command the server refused comes back, to be fixed and sent again.
// tty/submit.js imports this module so that this handler runs before its.
let lastSent = "";

document.body.addEventListener("htmx:configRequest", (event) => {
  if (event.detail.elt.id !== "command-form") return;
  const command = event.detail.parameters.p_command;
  if (!command || !command.trim()) { event.preventDefault(); return; }
  lastSent = command;
  recall.reset();
  $("#command").value = "";
});

document.body.addEventListener("htmx:responseError", (event) => {
  if (event.detail.elt.id !== "command-form") return;
  const input = $("#command");
  if (!input.value) input.value = lastSent;
});

document.body.addEventListener("htmx:afterRequest", fitInput);

// Fragments arrive from htmx and from the live loop; whichever way, keep
// cleared commands hidden and the prompt's directory current.
new MutationObserver(() => {
  screen.hideCleared();
  showPromptCwd();
}).observe($("#scrollback"), { childList: true });
