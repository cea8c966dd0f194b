// Where the sign-in's token is kept. It lives in localStorage: every tab of
// this origin (and only this origin) shares it, so a session link opened in
// a new tab is signed in, and signing out in one tab signs out the others.
// It is dropped once its "exp" has passed; see README, "Signing in".

export const TOKEN_KEY = "pg_shell.token";

export function token() {
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

export function rememberToken(value) { localStorage.setItem(TOKEN_KEY, value); }
export function forgetToken() { localStorage.removeItem(TOKEN_KEY); }
