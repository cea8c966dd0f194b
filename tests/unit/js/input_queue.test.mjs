// html/tty/input-queue.js on its own: what is typed reaches send_input whole
// and in order, whatever the server answers.
import assert from "node:assert/strict";
import test from "node:test";

import { InputQueue, MAX_BYTES, headOf, retryDelay } from "../../../html/tty/input-queue.js";

// A send_input stand-in: records each call's data, and answers with the
// next of `answers`: an HTTP status to fail with, "offline" for no
// answer, or nothing left for success.
function server(answers = []) {
  const calls = [];
  const gates = [];
  const send = (data) => {
    calls.push(data);
    const status = answers.shift();
    return new Promise((resolve, reject) => {
      gates.push(() => {
        if (status === undefined) resolve(calls.length);
        else reject(status === "offline" ? new TypeError("Failed to fetch") : httpError(status));
      });
    });
  };
  // Answers the oldest open call; resolves once the queue has reacted.
  const answer = async () => {
    gates.shift()();
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { calls, send, answer, open: () => gates.length };
}

function httpError(status, message = `HTTP ${status}`) {
  return Object.assign(new Error(message), { status });
}

const noWait = () => Promise.resolve();

test("keys typed while a call is in flight go together, in order, in the next call", async () => {
  const s = server();
  const q = new InputQueue({ send: s.send, wait: noWait });
  q.push("a");
  q.push("b");
  q.push("c\r");
  assert.deepEqual(s.calls, ["a"]);
  await s.answer();
  assert.deepEqual(s.calls, ["a", "bc\r"]);
  q.push("d");
  assert.equal(s.open(), 1);  // still one call at a time
  await s.answer();
  assert.deepEqual(s.calls, ["a", "bc\r", "d"]);
  await s.answer();
  await q.idle();
  assert.equal(q.pending, "");
});

test("a rate-limited piece is sent again after the hinted pause, with what came meanwhile", async () => {
  const s = server([429]);
  const waits = [];
  const q = new InputQueue({ send: s.send, wait: (ms) => { waits.push(ms); return Promise.resolve(); } });
  q.push("x");
  q.push("y");  // queued behind the call in flight
  assert.deepEqual(s.calls, ["x"]);
  await s.answer();  // 429
  assert.deepEqual(waits, [1000]);
  assert.deepEqual(s.calls, ["x", "xy"]);
  await s.answer();
  await q.idle();
  assert.equal(q.pending, "");
});

test("no answer or a 5xx sends the piece again; a 409 ends the queue", async () => {
  const s = server(["offline", 503]);
  const q = new InputQueue({ send: s.send, wait: noWait });
  q.push("1");
  await s.answer();  // the connection failed
  await s.answer();  // 503: rolled back
  await s.answer();
  await q.idle();
  assert.deepEqual(s.calls, ["1", "1", "1"]);

  const ended = server([409]);
  let ends = 0;
  const late = new InputQueue({ send: ended.send, wait: noWait, onEnded: () => { ends += 1; } });
  late.push("late");
  await ended.answer();
  await late.idle();
  late.push("more");
  assert.deepEqual(ended.calls, ["late"]);
  assert.equal(ends, 1);
  assert.ok(late.closed);
});

test("a refused piece is dropped and reported, the rest still goes", async () => {
  const s = server([400]);
  const errors = [];
  const q = new InputQueue({ send: s.send, wait: noWait, onError: (e) => errors.push(e.status) });
  q.push("bad");
  q.push("good");
  await s.answer();
  await s.answer();
  await q.idle();
  assert.deepEqual(s.calls, ["bad", "good"]);
  assert.deepEqual(errors, [400]);
});

test("keys typed before the command has an id wait for it; NUL is never sent", async () => {
  const s = server();
  const q = new InputQueue({ wait: noWait });
  q.push("ab\0c");
  assert.deepEqual(s.calls, []);
  q.start(s.send);
  assert.deepEqual(s.calls, ["abc"]);
  await s.answer();
});

test("a large paste goes in pieces of at most 64 KiB of UTF-8, cut between characters", async () => {
  const text = "é".repeat(40000) + "😀".repeat(20000);  // 80000 + 80000 bytes
  const s = server();
  const q = new InputQueue({ send: s.send, wait: noWait });
  q.push(text);
  while (s.open()) await s.answer();
  await q.idle();
  assert.equal(s.calls.join(""), text);
  for (const piece of s.calls) {
    assert.ok(new TextEncoder().encode(piece).length <= MAX_BYTES);
    assert.ok(!/[\uD800-\uDBFF]$/.test(piece), "a surrogate pair is cut");
  }
  assert.equal(s.calls.length, 3);
});

test("headOf and retryDelay", () => {
  assert.equal(headOf("abc", 2), "ab");
  assert.equal(headOf("aé", 2), "a");
  assert.equal(retryDelay(httpError(429, "input rate limit — Try again in 3 seconds."), 1), 3000);
  assert.equal(retryDelay(httpError(400), 1), null);
  assert.equal(retryDelay(httpError(401), 1), null);
  assert.equal(retryDelay(new TypeError("Failed to fetch"), 3), 2000);
});
