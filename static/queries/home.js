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
      textarea.focus();
    });
  });

  textarea.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  form.addEventListener("submit", function (event) {
    var names = form.querySelector("input[name=credential_names]");
    if (names && window.UndoableCredentials) names.value = window.UndoableCredentials.names().join(",");
    var submitter = event.submitter;
    var busy = form.querySelector("[data-busy]");
    if (submitter && submitter.getAttribute("data-testid") === "generate" && busy) busy.hidden = false;
    form.querySelectorAll("button[type=submit]").forEach(function (b) {
      // Disable after the browser has captured the submitter's formaction.
      window.setTimeout(function () { b.disabled = true; }, 0);
    });
  });
})();
