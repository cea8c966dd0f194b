// The key bar, for a phone: the keys a soft keyboard lacks (a sticky Ctrl,
// Esc, Tab, the arrows) and a field whose typing goes to the running
// terminal command (a soft keyboard types into a field more reliably than
// into the terminal's own hidden one). It is there while a terminal command
// takes input; app.css shows it on narrow or touch screens only.
import { control, stickyCtrl } from "./modifier.js";
import { liveTarget, onLiveChange } from "./views.js";

const bar = document.querySelector("#keybar");
const field = document.querySelector("#keybar-input");
const ctrlButton = bar.querySelector('[data-key="ctrl"]');

const KEYS = { esc: "\x1b", tab: "\t", enter: "\r", backspace: "\x7f" };
const ARROWS = { up: "A", down: "B", right: "C", left: "D" };

function send(data) {
  const view = liveTarget();
  if (view && data) view.type(data);
}

function keySequence(name) {
  if (name in ARROWS) return liveTarget()?.cursorKey(ARROWS[name]) ?? "";
  return KEYS[name] ?? "";
}

onLiveChange((live) => {
  bar.hidden = !live;
  if (!live) stickyCtrl.set(false);
});
stickyCtrl.onChange((armed) => ctrlButton.setAttribute("aria-pressed", String(armed)));

// A tap on a key keeps the focus (and the soft keyboard) where it was.
bar.addEventListener("pointerdown", (event) => {
  if (event.target.closest("button")) event.preventDefault();
});
bar.addEventListener("mousedown", (event) => {
  if (event.target.closest("button")) event.preventDefault();
});

bar.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-key]");
  if (!button) return;
  const name = button.dataset.key;
  if (name === "ctrl") stickyCtrl.set(!stickyCtrl.armed);
  else send(keySequence(name));
});

// What is typed into the field goes at once (the field stays empty), the
// armed Ctrl applied to its first character. While an input method
// composes a word, the word goes when it is done.
function flush() {
  const text = field.value;
  field.value = "";
  if (text) send(stickyCtrl.apply(text));
}

field.addEventListener("input", (event) => { if (!event.isComposing) flush(); });
field.addEventListener("compositionend", flush);

// Keys that type no text (a soft keyboard's Enter and ⌫, a tablet's
// keyboard): their terminal sequences. Ctrl held on a real keyboard works too.
field.addEventListener("keydown", (event) => {
  if (event.isComposing) return;
  const names = { Enter: "enter", Escape: "esc", Tab: "tab", ArrowUp: "up", ArrowDown: "down",
    ArrowLeft: "left", ArrowRight: "right" };
  let data = null;
  if (event.key in names) data = keySequence(names[event.key]);
  else if (event.key === "Backspace" && !field.value) data = KEYS.backspace;
  else if (event.ctrlKey && !event.altKey && !event.metaKey && event.key.length === 1) data = control(event.key);
  if (data === null) return;
  event.preventDefault();
  send(data);
});
