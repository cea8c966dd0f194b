// A command's output in the scrollback: appended as it arrives, read in
// full where the server cut it, collapsed when it is longer than a screen.
//
// A <pre class="out"> holds bytes [data-from, data-end) of the command's
// output, whose whole size is data-bytes. The feed's fragments (p_tail) carry
// what was appended since the cursor: a piece that starts where the page's
// copy ends is appended, so the text and any selection in it stay as they
// are. Otherwise (a cut preview, a gap) the rest is read with read_output_html.
// As in a terminal, a piece may change what is shown already: one with
// data-line brings the copy's last line again (a carriage return in it
// overwrote that line), one with data-clear cleared the screen.
import { $, fail, rpc } from "./api.js";
import { ACTIVE } from "./command-status.js";

// A command's <pre class="out">, with its byte range. (A fragment rendered
// without one, htmx's answer to a submit, holds its whole output so far.)
export function pre(article) {
  const out = article.querySelector(":scope > pre.out");
  if (out && out.dataset.end === undefined) {
    const size = String(new TextEncoder().encode(out.textContent).length);
    Object.assign(out.dataset, { from: "0", end: size, bytes: size });
  }
  return out;
}

// Adds to the page's copy ``out`` what the newer ``piece`` of the same
// output holds beyond it. Returns the text appended, for screen readers.
export function appendOutput(out, piece) {
  if (!out || !piece) return "";
  const from = Number(piece.dataset.from);
  const end = Number(out.dataset.end);
  out.dataset.bytes = String(Math.max(Number(out.dataset.bytes), Number(piece.dataset.bytes)));
  if (from === end && !out.dataset.filling) {
    const added = piece.textContent;
    join(out, piece);
    return added;
  }
  if (from === 0 && Number(piece.dataset.end) >= end && !out.dataset.filling) {
    out.replaceChildren(...piece.childNodes);  // a whole copy (htmx's submit answer)
    out.dataset.end = piece.dataset.end;
  }
  return "";
}

// Puts ``piece``, which starts where ``out`` ends, after it.
function join(out, piece) {
  if (piece.hasAttribute("data-clear")) out.replaceChildren();
  else if (piece.hasAttribute("data-line")) dropLastLine(out);
  out.append(...piece.childNodes);
  out.dataset.end = piece.dataset.end;
}

// Removes what ``out`` shows after its last newline. Its children are text
// and one-level <span>s of it, so the line is found from the end.
function dropLastLine(out) {
  for (let node = out.lastChild; node; node = out.lastChild) {
    const text = node.textContent;
    const at = text.lastIndexOf("\n");
    if (at < 0) { node.remove(); continue; }
    const kept = text.slice(0, at + 1);
    if (node.nodeType === Node.TEXT_NODE) node.data = kept; else node.textContent = kept;
    return;
  }
}

export function outputText(article) {
  const out = pre(article);
  return out ? out.textContent : "";
}

// Whether a finished command's output is longer than a screen (it is then
// collapsed until asked for); a running one stays open.
export function isTall(article) {
  const out = pre(article);
  return Boolean(out) && !ACTIVE.has(article.dataset.status) && !article.dataset.expanded
    && out.scrollHeight > window.innerHeight * 0.6;
}

// The "show all" control: an output cut by the server (the rest is read
// here) or collapsed.
export function fitOutput(article, tall = false) {
  const out = pre(article);
  if (!out) return;
  const marker = article.querySelector(":scope > p.cut");  // the server's, for pages without script
  if (marker) marker.remove();
  const cut = Number(out.dataset.end) < Number(out.dataset.bytes);
  if (tall) article.classList.add("collapsed");
  const wanted = cut || article.classList.contains("collapsed");
  let more = article.querySelector(":scope > .more");
  if (!wanted) { if (more) more.remove(); return; }
  if (!more) {
    more = document.createElement("p");
    more.className = "more";
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.showAll = article.dataset.id;
    button.textContent = "show all";
    more.append(document.createElement("span"), " ", button);
    out.after(more);
  }
  more.firstChild.textContent = cut
    ? `output cut: ${kib(out.dataset.end)} of ${kib(out.dataset.bytes)} shown`
    : "output collapsed";
}

function kib(bytes) {
  const n = Number(bytes);
  return n < 1024 ? `${n} bytes` : `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KiB`;
}

// Reads the rest of a command's output a page at a time, as HTML the server
// renders in the colours the output before each page left in force, and
// appends it.
export async function fill(article) {
  const out = pre(article);
  if (!out || out.dataset.filling) return;
  out.dataset.filling = "1";
  try {
    while (Number(out.dataset.end) < Number(out.dataset.bytes)) {
      const html = await rpc("read_output_html", { get: true, html: true, args: {
        p_command_id: article.dataset.id, p_offset: out.dataset.end } });
      const template = document.createElement("template");
      template.innerHTML = html;
      const page = template.content.querySelector("pre.out");
      if (!page || Number(page.dataset.end) <= Number(out.dataset.end)) break;
      join(out, page);
      out.dataset.bytes = String(Math.max(Number(page.dataset.bytes), Number(out.dataset.bytes)));
    }
  } catch (error) {
    fail(error);
  } finally {
    delete out.dataset.filling;
    fitOutput(article);
  }
}

$("#scrollback").addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-show-all]");
  if (!button) return;
  button.disabled = true;
  try {
    const article = button.closest("article.cmd");
    article.classList.remove("collapsed");
    article.dataset.expanded = "1";
    await fill(article);
    fitOutput(article);
  } catch (error) {
    fail(error);
  } finally {
    button.disabled = false;
  }
});
