// The page's one entry module (index.html loads it after htmx). Each module
// imports what it uses; the ones imported here for their effects wire up a
// part of the page: the input line and its keys, running commands, "fork
// from here", a command's id, an archived session, sign-in, and terminal
// commands (tty/: the prompt's submit on a terminal, the phone's key bar).
import "./input.js";
import "./running.js";
import "./fork.js";
import "./command-id.js";
import "./archived.js";
import "./signin.js";
import "./tty/submit.js";
import "./tty/keybar.js";
import { route } from "./router.js";

// After htmx has processed the page (its own DOMContentLoaded listener came
// first, from the script before this one): the views' hx-triggers are
// listening by then.
document.addEventListener("DOMContentLoaded", route);
