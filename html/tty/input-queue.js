// What is typed into a running terminal command, sent in order.
//
// One call at a time: keys that come while a call is in flight wait and go
// together in the next one, so a fast typist or a paste costs few calls and
// stays under the per-command rate limit. Nothing typed is lost or
// reordered: a piece leaves the queue only once the server took it. A 429
// (the rate limit), a 5xx (the call was rolled back) or no answer at all
// (the connection failed) sends the same piece again after a pause, with
// whatever was typed meanwhile behind it. A 409 (the command ended) ends
// the queue. Any other refusal drops that piece, says why, and goes on.
//
// No DOM and no other module of the page: the caller gives the send function, which
// also makes it testable on its own (tests/unit/js/input_queue.test.mjs).

export const MAX_BYTES = 65536;  // shell_api.send_input's limit per call

const encoder = new TextEncoder();

// The longest start of `text` whose UTF-8 is at most `maxBytes`, never
// cutting a character (nor a surrogate pair) in two.
export function headOf(text, maxBytes = MAX_BYTES) {
  if (text.length * 3 <= maxBytes) return text;  // no UTF-16 unit takes more than 3 bytes
  let bytes = 0;
  let end = 0;
  for (const ch of text) {  // by code point
    const size = encoder.encode(ch).length;
    if (bytes + size > maxBytes) break;
    bytes += size;
    end += ch.length;
  }
  return text.slice(0, end);
}

// How long to wait before sending a refused piece again, or null when it
// must not be sent again.
export function retryDelay(error, failures) {
  if (error.status === 429) {
    // The database's hint names the seconds ("Try again in 1 second").
    const hinted = /try again in (\d+) second/i.exec(error.message || "");
    return hinted ? Number(hinted[1]) * 1000 : 1000;
  }
  if (error.status === undefined || error.status >= 500) {
    return Math.min(10000, 250 * 2 ** failures);
  }
  return null;
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class InputQueue {
  #send = null;
  #pending = "";
  #busy = false;
  #wait;
  #onError;
  #onEnded;
  #drained = [];  // idle()'s callers, told when the queue is empty again
  closed = false;

  // send(data) → a promise that rejects with an error carrying the HTTP
  // status (api.js's ApiError) or none (no answer). It may be given later
  // (start): keys typed before the command has an id wait for it.
  constructor({ send = null, wait = pause, onError = () => {}, onEnded = () => {} } = {}) {
    this.#send = send;
    this.#wait = wait;
    this.#onError = onError;
    this.#onEnded = onEnded;
  }

  start(send) {
    this.#send = send;
    this.#pump();
  }

  push(data) {
    // PostgreSQL text holds no NUL (send_input refuses it): Ctrl-Space and
    // Ctrl-@ type one, and nothing else could carry it.
    const clean = data.replaceAll("\0", "");
    if (this.closed || !clean) return;
    this.#pending += clean;
    this.#pump();
  }

  // The command ended: what was not sent will never be.
  close() {
    this.closed = true;
    this.#pending = "";
  }

  get pending() { return this.#pending; }

  // Resolves once nothing is waiting or in flight (for callers that must
  // know their input went before they do the next thing).
  idle() {
    if (!this.#busy && (!this.#pending || this.closed || !this.#send)) return Promise.resolve();
    return new Promise((resolve) => this.#drained.push(resolve));
  }

  async #pump() {
    if (this.#busy || !this.#send) return;
    this.#busy = true;
    let failures = 0;
    try {
      while (!this.closed && this.#pending) {
        const piece = headOf(this.#pending);
        try {
          await this.#send(piece);
          this.#pending = this.#pending.slice(piece.length);
          failures = 0;
        } catch (error) {
          if (error.status === 409) {
            this.close();
            this.#onEnded(error);
            break;
          }
          failures += 1;
          const delay = retryDelay(error, failures);
          if (delay === null) {
            this.#pending = this.#pending.slice(piece.length);
            this.#onError(error);
          } else {
            await this.#wait(delay);
          }
        }
      }
    } finally {
      this.#busy = false;
      for (const resolve of this.#drained.splice(0)) resolve();
    }
  }
}
