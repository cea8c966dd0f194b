// Signing in and out, and where the token is kept. It lives in localStorage:
// every tab of this origin (and only this origin) shares it, so a session
// link opened in a new tab is signed in, and signing out in one tab signs
// out the others. It is dropped once its "exp" has passed; see README,
// "Signing in".
"use strict";

const TOKEN_KEY = "pg_shell.token";

function token() {
  const value = localStorage.getItem(TOKEN_KEY);
  if (value && tokenExpired(value)) { forgetToken(); return null; }
  return value;
}

function tokenExpired(value) {
  try {
    const payload = JSON.parse(atob(value.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    return typeof payload.exp === "number" && payload.exp * 1000 <= Date.now();
  } catch (_) { return true; }
}

function rememberToken(value) { localStorage.setItem(TOKEN_KEY, value); }
function forgetToken() { localStorage.removeItem(TOKEN_KEY); }

$("#login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  try {
    forgetToken();
    const answer = await rpc("login", { args: {
      p_username: form.p_username.value, p_password: form.p_password.value } });
    rememberToken(answer.token);
    form.reset();
    showStatus("");
    route();
  } catch (error) { fail(error); }
});

$("#logout").addEventListener("click", () => {
  forgetToken();
  showStatus("Signed out.", false);
  route();
});

window.addEventListener("storage", (event) => {
  if (event.key === TOKEN_KEY && !event.newValue) route();
});
