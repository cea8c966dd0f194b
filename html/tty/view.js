// One terminal command's screen: xterm.js in a <div class="tty-view"> of
// the command's article, fed with the output's raw bytes: those its
// fragments carry (<pre data-raw>), and read_output for the rest.
// While the command may still run it is live: typed into (send_input, in
// order, see input-queue.js) and sized with its element (resize_terminal).
// Once it ended, or when loaded later, it is read-only and as tall as what
// it shows. A read-only view far off screen gives its canvases back and is
// drawn again from the bytes it read when it comes near.
import { fail, rpc } from "../api.js";
import { FINISHED } from "../command-status.js";
import { InputQueue } from "./input-queue.js";
import { stickyCtrl } from "./modifier.js";
import { openTerminal } from "./xterm.js";

const TAIL = 1 << 20;        // a long output is read back from its last MiB
const RESIZE_DELAY_MS = 200;  // a window being dragged sends its last size only
const MIN_ROWS = 8;
const UTF8_ENCODER = new TextEncoder();
const UTF8_DECODER = new TextDecoder();

export class TerminalView {
  constructor({ live, cols = null, rows = null, onEnd = () => {} }) {
    this.id = null;          // the command's id, once known
    this.article = null;     // the command's article, once the view is in it
    this.live = live;
    this.cols = cols;        // the window the command has (the server took it)
    this.rows = rows;
    this.offset = 0;         // bytes of output read so far
    this.total = null;       // the output's size, as the fragment being read says
    this.data = "";          // what was read (its last TAIL characters), to draw again
    this.status = null;
    this.term = null;
    this.fit = null;
    this.disposed = false;
    this.onEnd = onEnd;
    this.reading = false;
    this.again = false;
    this.resizeTimer = 0;
    this.element = document.createElement("div");
    this.element.className = "tty-view";
    this.element.dataset.state = live ? "live" : "ended";
    // The screen's lines as text (the canvases hold none), for screen
    // readers and for anything that reads the page; not shown.
    this.text = document.createElement("pre");
    this.text.className = "tty-text visually-hidden";
    this.element.append(this.text);
    this.queue = live ? new InputQueue({ onError: fail, onEnded: () => this.update() }) : null;
  }

  // Opens the live terminal now, sized to the scrollback (the size a new
  // command is submitted with).
  openLive(box) {
    this.#open(box, { live: true });
    this.#fitLive(box);
    this.cols = this.term.cols;
    this.rows = this.term.rows;
    this.#showSize();
  }

  // The command's id is known: typed keys may go.
  start(id) {
    this.id = id;
    if (this.queue) {
      this.queue.start((data) => rpc("send_input", { args: { p_command_id: Number(id), p_data: data } }));
    }
    if (this.term && (this.term.cols !== this.cols || this.term.rows !== this.rows)) this.#resized();
  }

  // Into the command's article, in place of its HTML output (kept hidden,
  // emptied: scrollback.js and output.js still read its byte counts).
  attach(article) {
    this.article = article;
    const hadFocus = this.hasFocus();
    const out = article.querySelector(":scope > pre.out");
    this.#take(out, { whole: true });
    if (out) {
      out.hidden = true;
      out.replaceChildren();
      out.after(this.element);
    } else {
      article.append(this.element);
    }
    article.querySelector(":scope > .more")?.remove();  // "show all" is for HTML output
    article.classList.remove("collapsed");
    if (hadFocus) this.focus();  // moving an element takes the focus from it
  }

  // Draws it if it is not drawn (a view loaded later, or one that slept):
  // from what it read before, else by reading the output (a long one from
  // its end, given its size in bytes).
  async show(box, bytesHint = null) {
    if (this.term || this.disposed) return;
    this.#open(box, { live: this.live });
    if (this.live) this.#fitLive(box);
    if (this.data) {
      this.term.write(this.data);
      if (!this.live) await this.#settle();
    } else if (this.id !== null) {
      await this.update(bytesHint);
    }
  }

  // Gives back the canvases of a read-only view (it keeps its height).
  sleep() {
    if (!this.term || this.live) return;
    this.element.style.height = `${this.element.offsetHeight}px`;
    this.term.dispose();
    this.term = null;
    this.fit = null;
  }

  // Reads what was appended to the output since the last read and writes
  // it; called whenever the command changes. Calls that come while a read
  // is under way make it read once more at its end.
  async update(bytesHint = null) {
    if (this.id === null || this.disposed) return;
    if (this.reading) { this.again = true; return; }
    this.reading = true;
    try {
      do {
        this.again = false;
        await this.#readToEnd(bytesHint);
        bytesHint = null;
      } while (this.again && !this.disposed);
    } catch (error) {
      if (!this.disposed) fail(error);
    } finally {
      this.reading = false;
    }
  }

  // What the person typed (the key bar's keys, or from the terminal itself).
  type(data) {
    if (this.live && this.queue) this.queue.push(data);
  }

  // A cursor key as the program expects it: programs that ask for the
  // "application" cursor keys (less, vi, top) get ESC O x, others ESC [ x.
  cursorKey(letter) {
    const application = this.term && this.term.modes.applicationCursorKeysMode;
    return (application ? "\x1bO" : "\x1b[") + letter;
  }

  focus() {
    if (this.term) this.term.focus();
  }

  hasFocus() {
    return this.element.contains(document.activeElement);
  }

  // The window changed size: a live terminal follows it, debounced.
  refit(box) {
    if (!this.term || !this.live) return;
    this.#fitLive(box);
  }

  dispose() {
    this.disposed = true;
    this.live = false;
    if (this.queue) this.queue.close();
    clearTimeout(this.resizeTimer);
    if (this.term) this.term.dispose();
    this.term = null;
  }

  #open(box, { live }) {
    const fontSize = Math.round(parseFloat(getComputedStyle(box).fontSize)) || 14;
    const { term, fit } = openTerminal(this.element, {
      cols: this.cols || 80, rows: this.rows || 24, fontSize, live });
    this.term = term;
    this.fit = fit;
    // Once ended its text changes no more: #settle writes it once.
    term.onRender(() => { if (this.live) this.#mirror(); });
    if (!live) return;
    term.onData((data) => this.type(stickyCtrl.apply(data)));
    term.onResize(() => this.#resized());
    // Ctrl-C with text selected copies it, as in a desktop terminal;
    // without a selection it is the program's interrupt (\x03).
    term.attachCustomKeyEventHandler((event) => !(event.type === "keydown" && event.ctrlKey
      && !event.altKey && !event.metaKey && event.key.toLowerCase() === "c" && term.hasSelection()));
  }

  // A live terminal as tall as the scrollback less the command's own line
  // (at least MIN_ROWS rows), as wide as its article.
  #fitLive(box) {
    const line = (parseFloat(getComputedStyle(box).fontSize) || 14) * 1.4;
    const height = Math.max(MIN_ROWS * line, box.clientHeight - 3 * line);
    this.element.style.height = `${Math.floor(height)}px`;
    const size = this.fit.proposeDimensions();
    if (size && size.cols > 0 && size.rows > 0) {
      this.term.resize(Math.min(1000, size.cols), Math.min(1000, Math.max(MIN_ROWS, size.rows)));
    }
  }

  // The text of what the terminal shows: while live its screen, once ended
  // every line it holds (the part scrolled away too).
  #mirror() {
    const term = this.term;
    if (!term) return;
    const buffer = term.buffer.active;
    const from = this.live ? buffer.viewportY : 0;
    const to = this.live ? buffer.viewportY + term.rows : buffer.length;
    const lines = [];
    for (let y = from; y < to; y += 1) lines.push(buffer.getLine(y)?.translateToString(true) ?? "");
    while (lines.length && lines[lines.length - 1] === "") lines.pop();
    this.text.textContent = lines.join("\n");
  }

  #resized() {
    clearTimeout(this.resizeTimer);
    this.resizeTimer = setTimeout(() => this.#sendSize(), RESIZE_DELAY_MS);
  }

  async #sendSize() {
    if (!this.live || this.id === null || !this.term) return;
    const { cols, rows } = this.term;
    if (cols === this.cols && rows === this.rows) return;
    try {
      await rpc("resize_terminal", { args: { p_command_id: Number(this.id), p_cols: cols, p_rows: rows } });
      this.cols = cols;
      this.rows = rows;
      this.#showSize();
    } catch (error) {
      if (error.status !== 409) fail(error);  // 409: it ended meanwhile
    }
  }

  // The size the program has (once the server took it), on the element for
  // whoever reads the page.
  #showSize() {
    this.element.dataset.cols = String(this.cols);
    this.element.dataset.rows = String(this.rows);
  }

  async #readToEnd(bytesHint) {
    if (this.offset === 0 && bytesHint !== null && bytesHint > TAIL) {
      this.offset = await this.#tailStart(bytesHint - TAIL);
    }
    this.total = null;
    this.#take(this.article?.querySelector(":scope > pre.out"));
    // What the fragment brought may be all there is: then nothing is asked.
    while (this.total === null || this.offset < this.total) {
      const [page] = await rpc("read_output", { get: true, args: {
        p_command_id: Number(this.id), p_offset: this.offset } });
      if (this.disposed || !page) return;
      if (page.output) this.#write(page.output);
      this.offset = Number(page.next_offset);
      this.total = Number(page.output_bytes);
      this.status = page.status;
    }
    if (!FINISHED.has(this.status)) return;
    if (this.live) await this.#end();
    else await this.#settle();
  }

  // The first character boundary at or after `offset` (read_output refuses
  // a start inside a character): one byte of UTF-8 is read to find it.
  async #tailStart(offset) {
    for (let at = offset; at < offset + 4; at += 1) {
      try {
        await rpc("read_output", { get: true, args: { p_command_id: Number(this.id), p_offset: at, p_limit: 1 } });
        return at;
      } catch (error) {
        if (error.status !== 400) throw error;
      }
    }
    return 0;
  }

  // The raw output a fragment of the command carried (scrollback.js puts a
  // newer one's in the hidden <pre>): bytes data-from to data-end of its
  // data-bytes, with the command's status as of then. What of it follows
  // what the view has is written; each piece is taken once. ``whole``: only
  // a piece that is the whole output (a long one is read from its end).
  #take(out, { whole = false } = {}) {
    if (!out || !("raw" in out.dataset) || out.dataset.end === undefined) return;
    const from = Number(out.dataset.from);
    const end = Number(out.dataset.end);
    const bytes = Number(out.dataset.bytes);
    const text = out.textContent;
    delete out.dataset.from;
    delete out.dataset.end;
    out.replaceChildren();
    // A gap before it, or older than what was read: read_output says instead.
    if (from > this.offset || end < this.offset) return;
    if (whole && (from > 0 || end < bytes)) return;
    if (end > this.offset) {
      this.#write(from === this.offset ? text
        : UTF8_DECODER.decode(UTF8_ENCODER.encode(text).subarray(this.offset - from)));
      this.offset = end;
    }
    this.total = bytes;
    this.status = this.article.dataset.status;
  }

  #write(text) {
    this.data += text;
    if (this.data.length > 2 * TAIL) this.data = this.data.slice(-TAIL);
    if (this.term) this.term.write(text);
  }

  // The command ended: no more input, no cursor, as tall as its content.
  async #end() {
    const hadFocus = this.hasFocus();
    this.live = false;
    if (this.queue) this.queue.close();
    clearTimeout(this.resizeTimer);
    this.element.dataset.state = "ended";
    if (this.term) {
      this.term.options.disableStdin = true;
      this.term.options.cursorBlink = false;
      this.term.options.cursorInactiveStyle = "none";
      this.term.blur();
      await this.#settle();
    }
    this.onEnd(this, hadFocus);
  }

  // A read-only view shows its lines and no more: once everything written
  // is drawn, the terminal loses the empty rows below its last line (a
  // program that ended on the alternate screen, e.g. a cancelled `top`,
  // keeps its whole screen). Longer output scrolls inside it.
  async #settle() {
    const term = this.term;
    if (!term) return;
    await new Promise((resolve) => term.write("", resolve));
    if (this.term !== term) return;
    const buffer = term.buffer.active;
    if (buffer.type !== "normal" || buffer.baseY > 0) {
      this.element.style.height = "";
      this.#mirror();
      return;
    }
    let last = buffer.cursorY;
    const lineText = (y) => buffer.getLine(y)?.translateToString(true) ?? "";
    // The cursor waits on an empty line after the output: not shown. Moving
    // it up first makes the resize drop the empty rows below it.
    if (last > 0 && buffer.cursorX === 0 && lineText(last) === "") {
      await new Promise((resolve) => term.write("\x1b[A", resolve));
      last -= 1;
    }
    for (let y = term.rows - 1; y > last; y -= 1) {
      if (lineText(y) !== "") { last = y; break; }
    }
    if (last + 1 < term.rows) term.resize(term.cols, last + 1);
    this.element.style.height = "";
    this.#mirror();
  }
}
