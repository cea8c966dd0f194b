// xterm.js and its addons (vendored under html/vendor/) as module exports,
// and the page's one way of making a terminal.
//
// The vendored files are the packages' UMD builds: with no module system
// around, each puts its exports on globalThis. They are taken from there
// and the globals removed again, so the page's global scope holds none of
// ours (htmx's own object is the one library global the modules use).
//
// Rendering: xterm.js's default DOM renderer styles its rows with <style>
// elements and style attributes (24-bit colours), which the page's
// Content-Security-Policy (style-src 'self') refuses, so its colours and
// row layout were lost. The canvas renderer draws on <canvas> and needs
// neither; loaded before open(), it is the only renderer ever made. Its
// canvases hold no text: view.js keeps the screen's lines as text beside
// them. (xterm.js's screenReaderMode would too, but it changes how keys are
// taken: Tab leaves the terminal and typed text from an input method or
// an emoji picker is dropped.)
import "../vendor/xterm-5.5.0.js";
import "../vendor/addon-fit-0.10.0.js";
import "../vendor/addon-canvas-0.7.0.js";

const { Terminal } = globalThis;
const { FitAddon } = globalThis.FitAddon;
const { CanvasAddon } = globalThis.CanvasAddon;
delete globalThis.Terminal;
delete globalThis.FitAddon;
delete globalThis.CanvasAddon;

// The page's colours (app.css: --bg, --fg, and the .ansi-fg-* classes of
// plain output), so a terminal command looks like a plain one.
const THEME = {
  background: "#111418", foreground: "#d8dee9", cursor: "#d8dee9", cursorAccent: "#111418",
  selectionBackground: "#3b4a61",
  black: "#4d4d4d", red: "#e05252", green: "#5fba5f", yellow: "#d1b547",
  blue: "#5585e0", magenta: "#c265c2", cyan: "#4fb8c4", white: "#d0d0d0",
  brightBlack: "#808080", brightRed: "#ff6e6e", brightGreen: "#8ae28a", brightYellow: "#f5e16a",
  brightBlue: "#82a8ff", brightMagenta: "#ef8aef", brightCyan: "#7ee0ea", brightWhite: "#ffffff",
};
const FONT = '"DejaVu Sans Mono", Menlo, Consolas, monospace';

// A terminal opened in `element`, sized to cols x rows, with a fit addon
// (returned beside it) that sizes it to the element on demand. `fontSize`
// follows the scrollback's (smaller on a phone).
export function openTerminal(element, { cols, rows, fontSize, live }) {
  const term = new Terminal({
    cols, rows, fontSize, fontFamily: FONT, theme: THEME,
    scrollback: 5000,
    cursorBlink: live, cursorInactiveStyle: live ? "outline" : "none",
    disableStdin: !live,
    // Output is the program's, already with \r\n from the terminal's own
    // line discipline: nothing is translated.
    convertEol: false,
  });
  term.loadAddon(new CanvasAddon());
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(element);
  return { term, fit };
}
