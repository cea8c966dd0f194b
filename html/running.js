// A running command in the page (loaded after app.js): its elapsed time
// against the time limit, counted here from the start the server sent
// (data-started, data-limit), and a stop control by the input line that is
// there, on a phone too, whenever a command of the session is unfinished.
"use strict";

function elapsedWords(article) {
  const seconds = Math.max(0, Math.floor((Date.now() - Number(article.dataset.started)) / 1000));
  const limit = article.dataset.limit;
  return limit ? `running · ${seconds} s of the ${limit} s time limit` : `running · ${seconds} s`;
}

function tickRunning() {
  for (const article of $("#scrollback").querySelectorAll('article.cmd[data-status="running"][data-started]')) {
    const meta = article.querySelector(":scope > .meta");
    if (meta) meta.textContent = elapsedWords(article);
  }
  $("#stop").hidden = !terminal.activeCommand();
}

setInterval(tickRunning, 1000);
new MutationObserver(tickRunning).observe($("#scrollback"), { childList: true });

$("#stop").addEventListener("click", () => {
  const id = terminal.activeCommand();
  if (id) cancel(id);
});
