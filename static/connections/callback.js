/*
 * The sign-in popup's last page: hand the provider's answer (code or error, and state) to the
 * Connections panel that started it, then close. A BroadcastChannel, not window.opener: the
 * pages send Cross-Origin-Opener-Policy: same-origin, which cuts the opener link as soon as the
 * popup visits the provider. The channel reaches only this origin's pages; the panel acts only
 * on the state it is waiting for, and the code is useless without its PKCE verifier.
 */
(function () {
  "use strict";
  var params = new URLSearchParams(window.location.search);
  var answer = {
    type: "undoable:oauth-answer",
    code: params.get("code") || "",
    state: params.get("state") || "",
    error: params.get("error") || "",
    error_description: params.get("error_description") || "",
  };
  // The code leaves the address bar and the history at once.
  window.history.replaceState(null, "", window.location.pathname);
  var status = document.getElementById("callback-status");
  if (!("BroadcastChannel" in window)) {
    status.textContent = "This browser cannot hand the answer back. Nothing was stored.";
    return;
  }
  var channel = new BroadcastChannel("undoable-oauth");
  channel.postMessage(answer);
  channel.close();
  status.textContent = "Done. You can close this window.";
  window.close();
})();
