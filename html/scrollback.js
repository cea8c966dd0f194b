// The scrollback: the commands' fragments the server renders (from the
// first page, the live feed and htmx's answer to a submit) put in id order,
// a known command brought up to date in place rather than drawn again, so
// its output, any selection in it and the scroll position stay as they are.
import { $, showStatus } from "./api.js";
import { ACTIVE } from "./command-status.js";
import { files } from "./files.js";
import { appendOutput, fill, fitOutput, isTall, outputText, pre } from "./output.js";
import { screen, showPromptCwd } from "./screen.js";

// The largest data-change the scrollback has seen: the change feed (live.js)
// resumes after it.
let cursor = 0;

export function newestChange() { return cursor; }

// Another session opens: its feed starts from its own first page.
export function forgetChanges() { cursor = 0; }

// Puts fragments into the scrollback: a known command is updated in place
// (its output appended), a new one goes in id order. Keeps the view pinned
// to the bottom if it was there. A finished command that changed files (it
// carries a summary of its changes) has the files panel read them again.
// Returns how many commands the fragments held.
export function applyFragments(html, initial = false) {
  const box = $("#scrollback");
  const pinned = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  const template = document.createElement("template");
  template.innerHTML = html;
  const articles = [...template.content.querySelectorAll("article.cmd")];
  const known = new Map([...box.querySelectorAll("article.cmd")].map((a) => [a.id, a]));
  let filesChanged = false;
  let announced = "";
  let inPlace = false;
  const fresh = [];
  for (const article of articles) {
    cursor = Math.max(cursor, Number(article.dataset.change) || 0);
    filesChanged ||= article.querySelector(":scope > details.changes") !== null;
    const existing = known.get(article.id);
    if (existing) {
      announced += updateInPlace(existing, article);
      inPlace = true;
    } else {
      insertInOrder(box, article);
      known.set(article.id, article);
      if (!initial) announced += outputText(article);
      fresh.push(article);
    }
  }
  // Measured all at once, then drawn: one layout, however many commands.
  const tall = fresh.map((a) => isTall(a));
  fresh.forEach((a, i) => fitOutput(a, tall[i]));
  if (inPlace) afterInPlaceUpdate();
  if (announced) announce(announced);
  if (pinned) box.scrollTop = box.scrollHeight;
  if (filesChanged && !initial) files.changed();
  return articles.length;
}

export function insertInOrder(box, article) {
  const id = Number(article.dataset.id);
  const last = box.querySelector(":scope > article.cmd:last-of-type");
  if (!last || Number(last.dataset.id) < id) { box.append(article); return; }
  let after = null;
  for (const a of box.querySelectorAll("article.cmd")) {
    if (Number(a.dataset.id) > id) { after = a; break; }
  }
  box.insertBefore(article, after);
}

// Brings ``existing`` up to ``incoming`` (the same command, newer or equal
// change): attributes and everything around the output are replaced, the
// output node itself is kept and only grows (see output.js). Returns the
// new output's text.
function updateInPlace(existing, incoming) {
  if (Number(existing.dataset.change) > Number(incoming.dataset.change)) return "";
  for (const { name } of [...existing.attributes]) {
    if (!incoming.hasAttribute(name)) existing.removeAttribute(name);
  }
  const collapsed = existing.classList.contains("collapsed");
  for (const { name, value } of [...incoming.attributes]) existing.setAttribute(name, value);
  existing.classList.toggle("collapsed", collapsed);
  const out = pre(existing);
  // A terminal command's output is drawn from its raw bytes by html/tty/
  // in a .tty-view beside the (hidden) <pre>: the piece the fragment brought
  // waits in that <pre> for the view, which takes it once data-change moved.
  const view = existing.querySelector(":scope > .tty-view");
  if (view && out) handOver(out, pre(incoming));
  const added = view ? "" : appendOutput(out, pre(incoming));
  for (const child of [...existing.children]) {
    if (child !== out && child !== view) child.remove();
  }
  let before = true;
  for (const child of [...incoming.children]) {
    if (child.matches("pre.out")) { before = false; continue; }
    if (child.matches("p.cut")) continue;  // drawn by fitOutput
    if (before && out) existing.insertBefore(child, out); else existing.append(child);
  }
  if (view) return added;
  fitOutput(existing, isTall(existing));
  if (out && Number(out.dataset.end) < Number(out.dataset.bytes) && ACTIVE.has(existing.dataset.status)) {
    fill(existing);  // a running command's output: keep it whole
  }
  return added;
}

// A terminal command's new piece (raw bytes, data-from to data-end of
// data-bytes) into its hidden <pre>, for its view (html/tty/view.js).
function handOver(out, piece) {
  for (const name of ["data-raw", "data-from", "data-end", "data-bytes"]) {
    if (piece?.hasAttribute(name)) out.setAttribute(name, piece.getAttribute(name));
    else out.removeAttribute(name);
  }
  out.textContent = piece ? piece.textContent : "";
}

// Screen readers hear the output that arrived, once: the scrollback itself
// is not a live region (updating a command would read it all again).
function announce(text) {
  const region = $("#announce");
  if (region) region.textContent = text.length > 500 ? "…" + text.slice(-500) : text;
}

// screen.js keeps the prompt's directory and cleared commands in step with
// the articles that arrive (input.js watches for them); an update in place
// arrives as no new article.
function afterInPlaceUpdate() {
  screen.hideCleared();
  showPromptCwd();
}

// htmx appends the submitted command's fragment; the live loop may already
// have shown that command: the copy already there is kept, brought up to date.
function dedupe(box) {
  const seen = new Map();
  for (const article of [...box.querySelectorAll("article.cmd")]) {
    const first = seen.get(article.id);
    if (!first) { seen.set(article.id, article); continue; }
    updateInPlace(first, article);  // an older copy changes nothing
    article.remove();
  }
}

document.body.addEventListener("htmx:afterSwap", (event) => {
  if (event.detail.target.id !== "scrollback") return;
  const box = event.detail.target;
  dedupe(box);
  box.scrollTop = box.scrollHeight;
  showStatus("");
});
