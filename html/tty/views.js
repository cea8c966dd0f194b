// Which commands in the scrollback are terminal commands, and their views.
//
// A command is one when its article says so (data-tty, with the window it
// started with in data-cols and data-rows) or when this page submitted it
// with a terminal (stage, then adopt once the submit answered). Its view
// goes into its article when the article arrives, from whichever side (the
// submit, the live feed, a page of history), and reads the output again
// whenever the article's data-change moves. Views of history are drawn when
// they come near the screen and give their canvases back when far from it.
import { ACTIVE } from "../command-status.js";
import { TerminalView } from "./view.js";

const box = document.querySelector("#scrollback");
const views = new Map();  // command id → its view (one this page submitted: from the submit's answer)
const staged = new Set(); // views of commands being submitted, their id not known yet
const liveListeners = new Set();
let lastFocused = null;   // the live view typed into last: the key bar's target

// A live view for a command about to be submitted, at the end of the
// scrollback: shown and focused at once (keys typed now wait for the id),
// and sized, so the submit can give the program its window.
export function stage() {
  const view = new TerminalView({ live: true, onEnd: ended });
  staged.add(view);
  box.append(view.element);
  view.openLive(box);
  watchFocus(view);
  view.focus();
  box.scrollTop = box.scrollHeight;
  liveChanged();
  return view;
}

// The submit answered with the command's id: keys typed meanwhile go, and
// the view moves into the article now if it is there, else when it comes.
export function adopt(id, view) {
  staged.delete(view);
  if (view.disposed) return;
  view.start(id);
  views.set(id, view);
  const article = document.getElementById(`cmd-${id}`);
  if (article && article.parentElement === box) arrived(article);
}

// The submit failed: the staged view goes.
export function drop(view) {
  staged.delete(view);
  view.dispose();
  view.element.remove();
  liveChanged();
}

// The live view a key of the key bar goes to: the one with the focus, else
// the one typed into last, else the newest.
export function liveTarget() {
  const live = [...views.values(), ...staged].filter((v) => v.live);
  return live.find((v) => v.hasFocus()) || (live.includes(lastFocused) ? lastFocused : null)
    || live[live.length - 1] || null;
}

// listener(true) while some command takes input, listener(false) after.
export function onLiveChange(listener) {
  liveListeners.add(listener);
}

function liveChanged() {
  const any = liveTarget() !== null;
  for (const listener of liveListeners) listener(any);
}

function pinned() {
  return box.scrollHeight - box.scrollTop - box.clientHeight < 40;
}

// The server marks a terminal command's article with data-tty.
function marked(article) {
  const tty = article.dataset.tty;
  return tty !== undefined && tty !== "false";
}

function arrived(article) {
  const id = article.dataset.id;
  let view = views.get(id);
  if (view ? view.article : !marked(article)) return;
  const wasPinned = pinned();
  if (!view) {
    view = new TerminalView({
      live: ACTIVE.has(article.dataset.status), onEnd: ended,
      cols: Number(article.dataset.cols) || null, rows: Number(article.dataset.rows) || null });
    view.start(id);
    watchFocus(view);
    views.set(id, view);
  }
  // The output's size as the fragment gave it: a long one is read from its end.
  const bytes = Number(article.querySelector(":scope > pre.out")?.dataset.bytes) || null;
  view.attach(article);
  changes.observe(article, { attributes: true, attributeFilter: ["data-change"] });
  if (view.term) {
    view.update();
  } else if (view.live) {
    view.show(box, bytes);
  } else {
    view.pendingBytes = bytes;
    nearScreen.observe(view.element);
  }
  if (wasPinned) box.scrollTop = box.scrollHeight;
  liveChanged();
}

// A command ended: its view is read-only now, and the focus goes back to
// the input line if it was in the view.
function ended(view, hadFocus) {
  if (hadFocus) document.querySelector("#command").focus();
  liveChanged();
}

function watchFocus(view) {
  view.element.addEventListener("focusin", () => { lastFocused = view; });
}

// Views no longer in the page (another session opened) are let go.
function sweep() {
  for (const [id, view] of views) {
    if (view.element.isConnected) continue;
    nearScreen.unobserve(view.element);
    view.dispose();
    views.delete(id);
  }
  for (const view of staged) {
    if (!view.element.isConnected) { view.dispose(); staged.delete(view); }
  }
}

new MutationObserver((records) => {
  if (records.some((r) => r.removedNodes.length)) sweep();
  for (const record of records) {
    for (const node of record.addedNodes) {
      if (node.matches?.("article.cmd")) arrived(node);
    }
  }
  liveChanged();
}).observe(box, { childList: true });

// The article's data-change moved: the command's output or state changed.
const changes = new MutationObserver((records) => {
  for (const record of records) views.get(record.target.dataset.id)?.update();
});

// History is drawn near the screen only; read-only views far from it sleep
// (their canvases freed, their height kept) and are drawn again on return.
const nearScreen = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    const view = views.get(entry.target.closest("article.cmd")?.dataset.id);
    if (!view || view.element !== entry.target) continue;
    if (!entry.isIntersecting) { view.sleep(); continue; }
    const wasPinned = pinned();
    const bytes = view.pendingBytes;
    view.pendingBytes = null;
    view.show(box, bytes).then(() => { if (wasPinned) box.scrollTop = box.scrollHeight; });
  }
}, { root: box, rootMargin: "300px 0px" });

// A live terminal follows the size of the window.
let refitTimer = 0;
new ResizeObserver(() => {
  clearTimeout(refitTimer);
  refitTimer = setTimeout(() => {
    for (const view of [...views.values(), ...staged]) view.refit(box);
  }, 100);
}).observe(box);
