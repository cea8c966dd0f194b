"""The browser's view of latency: press Enter on `echo hi` in the real page
(headless Chromium, the real gateway and executor daemon, real Docker) and
time until its output is painted; in the same run, the executor's end-to-end
time for the same command from the database (completed_at - submitted_at).
By turns, the command is typed back to back (at once after the previous
one's output) and after a pause: the next command must not wait for the
container the previous one's completion has just started (target: back to
back within 1.5x of paused).

The UI path adds the HTTP submit, the gateway's long-poll wake-up and the DOM
update to what the executor does; the target is UI <= executor end-to-end +
150 ms. Output is streamed while a command runs, so "output visible" may come
before the command is marked complete; "done visible" (the status shown as
done) is the like-for-like figure.

In the same run: the bytes the page received while a command streamed 1 MiB
of output (target: at most 1.3 MiB; the feed appends, never re-sends), and
the time to open again a session holding 2 MB of output (40 commands of
50 KiB; target: 1 s).

Needs DATABASE_URL (a superuser; the gateway connects as shell_authenticator
without a password), a Docker engine, the sandbox image (PG_SHELL_IMAGE,
default pg-shell-sandbox:latest), Debian's chromium and the test extras
(`pip install -e '.[test]'`). Prints one JSON object per line on stdout;
progress goes to stderr.

    .venv/bin/python -m bench.ui --runs 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Report,
    add_dsn_option,
    add_image_option,
    create_user,
    image_id,
    migrated_database,
    require_dsn,
    running_executor,
    running_gateway,
)
from bench.common import quantile_nearest_rank as quantile
from executor.db.connection import Connection, connect, query
from tests.browser.stack import PASSWORD, Terminal, chromium_path, launch_chromium

TARGET_OVERHEAD_MS = 150
TARGET_BACK_TO_BACK = 1.5  # Enter -> output typed back to back, over typed after a pause
COMMAND = "echo hi"

# Installed before each Enter: a keydown listener takes t0 (the real key
# press, before the form submits) and a MutationObserver notes when the new
# command's output and its "done" status reach the DOM; each time is taken
# at the next animation frame, when it is painted.
ARM = """
([expected]) => {
  const box = document.querySelector('#scrollback');
  const input = document.querySelector('#command');
  const known = new Set([...box.querySelectorAll('article.cmd')].map((a) => a.id));
  const result = window.__bench = {t0: null, output: null, done: null, id: null};
  const painted = (key) => requestAnimationFrame(() => {
    if (result[key] === null) result[key] = performance.now() - result.t0;
  });
  const check = () => {
    if (result.t0 === null) return;
    for (const a of box.querySelectorAll('article.cmd')) {
      if (known.has(a.id)) continue;
      result.id = a.dataset.id;
      const out = a.querySelector('pre.out');
      if (out && out.textContent === expected) painted('output');
      if (a.dataset.status === 'done') { painted('done'); observer.disconnect(); }
    }
  };
  const observer = new MutationObserver(check);
  observer.observe(box, {childList: true, subtree: true, characterData: true, attributes: true});
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && result.t0 === null) result.t0 = performance.now();
  }, {capture: true, once: true});
}
"""


REPORT = Report("ui")
log, emit = REPORT.log, REPORT.emit


def measure(term: Terminal, conn: Connection, runs: int, warmup: int,
            pause_s: float) -> dict[str, list[dict[str, float]]]:
    """Enter on COMMAND, by turns typed back to back (at once after the
    previous command's output was painted) and after a pause of ``pause_s``:
    each mode's samples."""
    samples: dict[str, list[dict[str, float]]] = {"back_to_back": [], "paused": []}
    for i in range(warmup + 2 * runs):
        mode = "paused" if i % 2 else "back_to_back"
        if mode == "paused":
            time.sleep(pause_s)
        term.page.evaluate(ARM, ["hi\n"])
        term.input.fill(COMMAND)
        term.input.press("Enter")
        term.page.wait_for_function("() => window.__bench.output !== null && "
                                    "window.__bench.done !== null",
                                    timeout=60_000)
        seen = term.page.evaluate("() => window.__bench")
        row = query(conn, """
            SELECT extract(epoch FROM completed_at - submitted_at) * 1000 AS e2e_ms, status
            FROM shell.commands WHERE id = %s""", (int(seen["id"]),))[0]
        if row["status"] != "done":
            raise SystemExit(f"bench.ui: command {seen['id']} ended {row['status']}")
        if i >= warmup:
            samples[mode].append({"output_ms": seen["output"], "done_ms": seen["done"],
                                  "e2e_ms": float(row["e2e_ms"])})
        log(f"run {i + 1 - warmup if i >= warmup else 'warm-up'} ({mode}): output "
            f"{seen['output']:.0f} ms, done {seen['done']:.0f} ms, executor end-to-end "
            f"{float(row['e2e_ms']):.0f} ms")
    return samples


STREAM_LINES = 255  # 4 KiB lines: 1,044,480 bytes, just under the 1 MiB output cap
STREAM = (f"for i in $(seq 1 {STREAM_LINES}); do head -c 4095 /dev/zero | tr '\\0' a; echo; "
          "sleep 0.01; done")
TARGET_STREAM_RATIO = 1.3
REOPEN_COMMANDS = 40
REOPEN = "head -c 51200 /dev/zero | tr '\\0' b | fold -w 100"  # 50 KiB each: 2 MB in all
TARGET_REOPEN_MS = 1000


def streaming_bytes(term: Terminal) -> None:
    """Bytes the page received while a command streamed 1 MiB of output."""
    finished: list[Any] = []

    def note(request: Any) -> None:
        if "/rpc/" in request.url:
            finished.append(request)
    term.page.on("requestfinished", note)
    article = term.run(STREAM)
    term.page.wait_for_timeout(500)  # the answer that brought "done" is counted too
    term.page.remove_listener("requestfinished", note)
    received = [r.sizes()["responseBodySize"] for r in finished]
    output = STREAM_LINES * 4096
    shown = len(article.locator("pre.out").text_content() or "")
    emit({"metric": "bytes_sent_for_a_streaming_command_of_1_MiB", "value": sum(received),
          "unit": "bytes", "output_bytes": output, "responses": len(received),
          "ratio": round(sum(received) / output, 3), "target_max_ratio": TARGET_STREAM_RATIO,
          "within_target": sum(received) <= TARGET_STREAM_RATIO * 1024 * 1024,
          "output_shown_chars": shown})


def reopen_time(term: Terminal, runs: int) -> None:
    """A session holding 2 MB of output (40 commands of 50 KiB), opened again."""
    for _ in range(REOPEN_COMMANDS):
        term.run(REOPEN)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        term.page.reload()
        term.page.wait_for_function(
            "n => document.querySelectorAll('#scrollback article.cmd').length === n && "
            "document.querySelector('#scrollback article.cmd:last-of-type pre.out')"
            ".textContent.length > 0", arg=REOPEN_COMMANDS, timeout=60_000)
        term.page.evaluate("() => new Promise(requestAnimationFrame)")
        times.append((time.perf_counter() - started) * 1000)
    emit({"metric": "reopen_a_2MB_session_p50", "value": round(quantile(times, 0.5), 1),
          "unit": "ms", "runs": runs, "commands": REOPEN_COMMANDS, "output_bytes": 51200 * 40,
          "target_max": TARGET_REOPEN_MS,
          "within_target": quantile(times, 0.5) <= TARGET_REOPEN_MS})


def report(samples: list[dict[str, float]], runs: int, mode: str) -> None:
    common: dict[str, Any] = {"runs": runs, "command": COMMAND, "typed": mode}
    for key, metric in (("output_ms", "enter_to_output_visible"),
                        ("done_ms", "enter_to_done_visible"), ("e2e_ms", "executor_end_to_end")):
        values = [s[key] for s in samples]
        for q, name in ((0.5, "p50"), (0.9, "p90")):
            emit({"metric": f"{metric}_{name}", "value": round(quantile(values, q), 1),
                  "unit": "ms", **common})
    for key, metric in (("output_ms", "ui_output_overhead"), ("done_ms", "ui_done_overhead")):
        diffs = [s[key] - s["e2e_ms"] for s in samples]
        for q, name in ((0.5, "p50"), (0.9, "p90")):
            value = round(quantile(diffs, q), 1)
            emit({"metric": f"{metric}_{name}", "value": value, "unit": "ms",
                  "target_max": TARGET_OVERHEAD_MS, "within_target": value <= TARGET_OVERHEAD_MS,
                  "mean": round(statistics.fmean(diffs), 1), **common})


def report_back_to_back(samples: dict[str, list[dict[str, float]]], pause_s: float) -> None:
    """Enter -> output p50 typed back to back over typed after a pause."""
    b2b, paused = (quantile([s["output_ms"] for s in samples[m]], 0.5)
                   for m in ("back_to_back", "paused"))
    ratio = b2b / paused
    emit({"metric": "back_to_back_over_paused", "value": round(ratio, 2), "unit": "ratio",
          "back_to_back_p50_ms": round(b2b, 1), "paused_p50_ms": round(paused, 1),
          "pause_s": pause_s, "target_max": TARGET_BACK_TO_BACK,
          "within_target": ratio <= TARGET_BACK_TO_BACK})


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ui",
                                     description=(__doc__ or "").split("\n\n")[0])
    add_dsn_option(parser)
    add_image_option(parser)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pause-s", type=float, default=3.0,
                        help="the pause before a command typed after one (default 3 s)")
    args = parser.parse_args()
    admin_dsn = require_dsn(parser, args)
    if chromium_path() is None:
        raise SystemExit("bench.ui: Debian's chromium is not installed")

    from playwright.sync_api import sync_playwright

    image = image_id(args.image)
    work = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    with migrated_database(admin_dsn, "pgshell_bench_ui") as dsn:
        create_user(dsn, "bench", PASSWORD)
        rootful = os.environ.get("PG_SHELL_ALLOW_ROOTFUL", "1")
        with running_executor(dsn, image, "ui", work, timeout=60, PG_SHELL_ALLOW_ROOTFUL=rootful), \
                running_gateway(dsn, work) as gateway:
            log(f"daemon and gateway up ({gateway.url}); {args.warmup} warm-up + {args.runs} runs")
            conn = connect(dsn)
            with sync_playwright() as pw:
                browser = launch_chromium(pw)
                try:
                    term = Terminal(browser.new_page(), gateway.url)
                    term.login("bench")
                    term.new_session("bench")
                    samples = measure(term, conn, args.runs, args.warmup, args.pause_s)
                    streaming_bytes(term)
                    term.page.click(".brand")
                    term.new_session("reopen")
                    reopen_time(term, 5)
                finally:
                    browser.close()
            for mode, taken in samples.items():
                report(taken, args.runs, mode)
            report_back_to_back(samples, args.pause_s)
            conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
