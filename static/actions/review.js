// The Review page. Its list comes with the page and is fetched again whenever the count of
// changes waiting moves (static/workspaces/waiting.js hears it over the websocket and passes
// it on as "undoable:waiting"): an action an agent just left waiting appears without a reload.
// Keep and Discard post to the query page's own views in the background and show the list as
// it then stands; without this script the same forms post plainly and come back here.
(function () {
  "use strict";
  var list = document.querySelector("[data-review-list]");
  if (!list) return;
  var count = document.querySelector("[data-review-waiting]");
  var errorBox = document.querySelector("[data-review-error]");
  var LABELS = { keep: "Keeping…", discard: "Discarding…" };
  var generation = 0; // only the newest fetch may replace the list
  var deciding = 0; // Keep/Discard in flight: a refresh waits for their answers

  function showError(text) {
    errorBox.textContent = text;
    errorBox.hidden = !text;
  }

  // Fetch the list again. The card of the last Keep/Discard, or the card that held the focus,
  // takes it back once it is shown, so a keyboard user stays where they were.
  var focusNext = ""; // the card of the last Keep/Discard: the next list shown focuses it
  function refresh() {
    if (deciding) return;
    var mine = ++generation;
    fetch(list.dataset.listUrl, { credentials: "same-origin" }).then(function (response) {
      return response.ok ? response.text() : null;
    }).then(function (html) {
      if (html === null || mine !== generation || deciding) return;
      // Focus inside the list (a card, a Keep button) would be lost with the old nodes.
      var held = list.contains(document.activeElement) && document.activeElement.closest("[data-action-id]");
      var keep = focusNext || (held ? held.id : "");
      focusNext = "";
      list.innerHTML = html;
      var card = keep && document.getElementById(keep);
      if (card) card.focus();
    }).catch(function () {
      // The next count from the socket fetches it again.
    });
  }

  function decide(form) {
    showError("");
    var card = form.closest("[data-action-id]");
    // Disabling the pressed button drops the focus: the card takes it once the list is back.
    focusNext = card ? card.id : "";
    var button = form.querySelector("button");
    form.parentNode.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    button.textContent = LABELS[form.dataset.changeAction] || button.textContent;
    deciding += 1;
    fetch(form.action, {
      method: "POST",
      credentials: "same-origin",
      headers: { Accept: "application/json" },
      body: new FormData(form),
    }).then(function (response) {
      return response.json();
    }).then(function (answer) {
      showError(answer.error || "");
    }, function () {
      showError("Could not reach the server; the list shows the actions as they now stand.");
    }).then(function () {
      deciding -= 1;
      refresh();
    });
  }

  list.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-change-action]");
    if (!form) return;
    event.preventDefault();
    decide(form);
  });

  document.addEventListener("undoable:waiting", function (event) {
    var n = event.detail.count;
    count.parentNode.lastChild.textContent = (n === 1 ? " change" : " changes") + " waiting for Keep or Discard.";
    count.textContent = String(n);
    refresh();
  });
})();
