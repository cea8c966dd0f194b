// Signing in and out (the token is token.js's).
import { $, fail, rpc, showStatus } from "./api.js";
import { route } from "./router.js";
import { forgetToken, rememberToken, TOKEN_KEY } from "./token.js";

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

// Signed out in another tab.
window.addEventListener("storage", (event) => {
  if (event.key === TOKEN_KEY && !event.newValue) route();
});
