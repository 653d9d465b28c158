// Home page: example prompts fill the form; the form says it is busy while the model thinks;
// the names (never values) of the browser's credentials go along so the code can use them.
(function () {
  "use strict";
  var form = document.querySelector("[data-prompt-form]");
  if (!form) return;
  var textarea = form.querySelector("textarea");
  var kind = form.querySelector("select");

  document.querySelectorAll("[data-example]").forEach(function (button) {
    button.addEventListener("click", function () {
      textarea.value = button.getAttribute("data-example");
      kind.value = button.getAttribute("data-example-kind");
      if (count) showCount();
      textarea.focus();
    });
  });

  // The server refuses a prompt over its limit (and says so); the count warns before that,
  // instead of the browser cutting pasted text without a word.
  var count = form.querySelector("[data-prompt-count]");
  var maxChars = Number(textarea.getAttribute("data-max-chars")) || 0;
  function showCount() {
    var length = textarea.value.length;
    var over = maxChars && length > maxChars;
    count.hidden = !maxChars || length < maxChars * 0.8;
    count.classList.toggle("over", !!over);
    count.textContent = over
      ? "Too long by " + (length - maxChars).toLocaleString() + " characters (at most " + maxChars.toLocaleString() + ")."
      : length.toLocaleString() + " of " + maxChars.toLocaleString() + " characters";
  }
  if (count) {
    textarea.addEventListener("input", showCount);
    showCount();
  }

  textarea.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  form.addEventListener("submit", function (event) {
    var names = form.querySelector("input[name=credential_names]");
    if (names && window.UndoableCredentials) names.value = window.UndoableCredentials.names().join(",");
    // Connected services and their granted scopes (never a token), so the model keeps within them.
    var connections = form.querySelector("input[name=connections]");
    if (connections && window.UndoableConnections) connections.value = JSON.stringify(window.UndoableConnections.forPrompt());
    var submitter = event.submitter;
    var busy = form.querySelector("[data-busy]");
    if (submitter && submitter.getAttribute("data-testid") === "generate" && busy) busy.hidden = false;
    form.querySelectorAll("button[type=submit]").forEach(function (b) {
      // Disable after the browser has captured the submitter's formaction.
      window.setTimeout(function () { b.disabled = true; }, 0);
    });
  });
})();
