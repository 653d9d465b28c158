// The workspace panel. Its body comes with the page; the run's websocket says when the change
// moved on (query.js passes that on as "undoable:change" and "undoable:run-status" events) and
// the body is fetched again. Keep and Discard changes post in the background: the buttons say
// "Keeping…" / "Discarding…" at once, then the answer's panel shows the result. Only while no
// run socket is connected does a slow poll stand in for the events. (The typed confirmation of
// an irreversible run is asked by query.js, for every kind, and checked by the server.)
(function () {
  "use strict";
  const FALLBACK_POLL_MS = 30000;
  const PENDING = {
    keep: { label: "Keeping…", status: "keep_requested" },
    undo: { label: "Discarding…", status: "undo_requested" },
  };
  const panel = document.querySelector("[data-workspace-panel]");
  if (!panel) return;
  const body = panel.querySelector("[data-panel-body]");
  const errorBox = panel.querySelector("[data-panel-error]");
  const url = panel.dataset.panelUrl;
  let generation = 0; // each swap or fetch takes a number; only the newest may swap the body
  let deciding = false; // a Keep/Discard is in flight: its answer is the next body
  let missed = false; // an event arrived meanwhile: fetch once the answer is shown
  let connected = false;
  let pollTimer = null;
  let lastRunStatus = "";

  async function refresh() {
    if (deciding) {
      missed = true;
      return;
    }
    const mine = ++generation;
    try {
      const response = await fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } });
      const html = await response.text();
      if (response.ok && mine === generation) body.innerHTML = html;
    } catch (err) {
      // The next event, reconnect or fallback poll fetches it again.
    }
  }

  function schedulePoll() {
    clearTimeout(pollTimer);
    if (connected) return;
    pollTimer = setTimeout(function () { refresh().then(schedulePoll); }, FALLBACK_POLL_MS);
  }

  function showError(text) {
    errorBox.textContent = text;
    errorBox.hidden = !text;
  }

  function showPending(form) {
    const pending = PENDING[form.dataset.changeAction];
    body.querySelectorAll("[data-change-action] button").forEach(function (button) { button.disabled = true; });
    form.querySelector("button").textContent = pending.label;
    const change = body.querySelector("[data-change-status]");
    if (change) change.dataset.changeStatus = pending.status;
    const status = body.querySelector('[data-testid="change-status"]');
    if (status) status.textContent = pending.label;
  }

  async function decide(form) {
    showError("");
    showPending(form);
    deciding = true;
    const mine = ++generation;
    try {
      const response = await fetch(form.action, {
        method: "POST",
        credentials: "same-origin",
        headers: { Accept: "application/json" },
        body: new FormData(form),
      });
      const answer = await response.json();
      if (mine === generation && answer.panel) body.innerHTML = answer.panel;
      showError(answer.error || "");
      if (!answer.panel) missed = true;
    } catch (err) {
      showError("Could not reach the server; the panel shows the change as it now stands.");
      missed = true;
    } finally {
      deciding = false;
    }
    if (missed) {
      missed = false;
      refresh();
    }
  }

  body.addEventListener("submit", function (event) {
    const form = event.target.closest("form[data-change-action]");
    if (!form) return;
    event.preventDefault();
    decide(form);
  });

  document.addEventListener("undoable:change", function () { refresh(); });
  // A run starting or ending moves its change too (created "running", settled before the end).
  document.addEventListener("undoable:run-status", function (event) {
    const key = event.detail.run_id + ":" + event.detail.status;
    if (key === lastRunStatus) return;
    lastRunStatus = key;
    refresh();
  });
  document.addEventListener("undoable:run-socket", function (event) {
    connected = event.detail.connected;
    if (connected) refresh(); // whatever changed while it was down
    schedulePoll();
  });

  setInterval(function () {
    const node = body.querySelector("[data-countdown]");
    if (node) node.textContent = String(Math.max(0, parseInt(node.textContent, 10) - 1));
  }, 1000);
  schedulePoll();
})();
