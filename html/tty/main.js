// Terminal commands in the page (DESIGN.md §13): the prompt submits them
// (submit.js), their output is drawn by xterm.js in their articles
// (views.js, view.js) and a phone gets a key bar (keybar.js). Loaded as a
// module after the page's plain scripts, whose names it reaches only
// through page.js.
import "./submit.js";
import "./keybar.js";
