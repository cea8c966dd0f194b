// The sticky Ctrl of the phone's key bar: armed by its button, it turns the
// next character typed (in the bar's field or in the terminal itself) into
// its control character, then lets go, as a phone has no Ctrl key to hold.

const listeners = new Set();

export const stickyCtrl = {
  armed: false,

  set(armed) {
    this.armed = armed;
    for (const listener of listeners) listener(armed);
  },

  onChange(listener) {
    listeners.add(listener);
  },

  // `data` as typed, its first character made a control character when armed.
  apply(data) {
    if (!this.armed || !data) return data;
    this.set(false);
    return control(data[0]) + data.slice(1);
  },
};

// Ctrl with a key, as a terminal sends it: letters and @[\]^_ give 0x00-0x1f
// (Ctrl-C is \x03), ? gives DEL; anything else is sent as it is.
export function control(ch) {
  if (ch === "?") return "\x7f";
  const code = ch.toUpperCase().charCodeAt(0);
  return code >= 0x40 && code <= 0x5f ? String.fromCharCode(code & 0x1f) : ch;
}
