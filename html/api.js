// Calling the HTTP API (PostgREST's /rpc/<function>), for fetch and for
// htmx alike, and saying what went wrong on the status line.
import { forgetToken, token } from "./token.js";

export const $ = (sel) => document.querySelector(sel);

export function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

export function showStatus(text, isError = true) {
  const el = $("#status");
  el.textContent = text || "";
  el.classList.toggle("error", Boolean(text) && isError);
}

export class ApiError extends Error {
  constructor(status, body) {
    const message = (body && body.message) || `HTTP ${status}`;
    super(body && body.hint ? `${message} — ${body.hint}` : message);
    this.status = status;
  }
}

async function errorOf(response) {
  let body = null;
  try { body = JSON.parse(await response.text()); } catch (_) { /* not JSON */ }
  return new ApiError(response.status, body);
}

// One /rpc call: JSON in, JSON (or HTML with html: true, a Blob of the raw
// bytes with bytes: true) out. The views are htmx's (index.html); this is
// for actions and for what htmx cannot do (the live loop, bytes).
export async function rpc(name, { args = null, get = false, html = false, bytes = false, signal, headers = {} } = {}) {
  const init = { method: get ? "GET" : "POST", signal, headers: { ...headers } };
  let url = `/rpc/${name}`;
  if (get && args) url += "?" + new URLSearchParams(args);
  if (!get) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(args || {});
  }
  if (token()) init.headers.Authorization = `Bearer ${token()}`;
  init.headers.Accept = html ? "text/html" : bytes ? "application/octet-stream" : "application/json";
  const response = await fetch(url, init);
  if (!response.ok) throw await errorOf(response);
  return html ? response.text() : bytes ? response.blob() : response.json();
}

// What a 401 does once the token is dropped: router.js shows the sign-in
// form (it registers itself here; this module sits below it).
let signedOut = () => {};
export function onSignedOut(callback) { signedOut = callback; }

// An error on the status line; a 401 means the token is no longer good, so
// it is dropped and the sign-in form shown.
export function fail(error) {
  if (error.name === "AbortError") return;
  if (error.status === 401) {
    forgetToken();
    showStatus("Please sign in again: " + error.message);
    signedOut();
    return;
  }
  showStatus(error.message);
}

// The error an htmx request answered with, as rpc's.
export function htmxError(event) {
  const xhr = event.detail.xhr;
  let body = null;
  try { body = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
  return new ApiError(xhr.status, body);
}

// htmx's requests (the views, the command form) carry the token and ask for
// HTML, and their errors are reported as fetch's are, unless the element
// that asked reported it itself (it calls preventDefault: the files panel).
document.body.addEventListener("htmx:configRequest", (event) => {
  if (token()) event.detail.headers.Authorization = `Bearer ${token()}`;
  event.detail.headers.Accept = "text/html";
});

document.body.addEventListener("htmx:responseError", (event) => {
  if (!event.defaultPrevented) fail(htmxError(event));
});

document.body.addEventListener("htmx:sendError", () => showStatus("The server cannot be reached."));
