// The workspace panel. Its body comes with the page; the run's websocket says when the change
// moved on (query.js passes that on as "undoable:change" and "undoable:run-status" events) and
// the body is fetched again. Keep and Discard post in the background: the buttons say
// "Keeping…" / "Discarding…" at once, then the answer's panel shows the result. Only while no
// run socket is connected does a slow poll stand in for the events. (The typed confirmation of
// an irreversible run is asked by query.js, for every kind, and checked by the server.)
(function () {
  "use strict";
  const FALLBACK_POLL_MS = 30000;
  const PENDING = {
    keep: { label: "Keeping…", status: "keep_requested" },
    discard: { label: "Discarding…", status: "discard_requested" },
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
  const bar = document.querySelector("[data-decision-bar]");
  const announcer = document.querySelector("[data-decision-announce]");
  const badge = document.querySelector("[data-status-badge]");
  let announcedChange = "";
  // The bar stands in for the panel's own Keep and Discard only while those are out of view.
  let actionsInView = false;
  const actionsWatch = "IntersectionObserver" in window ? new IntersectionObserver(function (entries) {
    actionsInView = entries.some(function (entry) { return entry.isIntersecting; });
    sync();
  }) : null;
  let watched = null;

  async function refresh() {
    if (deciding) {
      missed = true;
      return;
    }
    const mine = ++generation;
    try {
      const response = await fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } });
      const html = await response.text();
      if (response.ok && mine === generation) swap(html);
    } catch (err) {
      // The next event, reconnect or fallback poll fetches it again.
    }
  }

  function swap(html) {
    body.innerHTML = html;
    sync();
  }

  // What the rest of the page says about the change in the panel's body: the bar at the bottom
  // of the viewport (with the countdown of a db change), the run's badge, the header's count.
  function sync() {
    const change = body.querySelector("[data-change-status]");
    const waiting = !!change && change.dataset.changeStatus === "pending";
    const countdown = body.querySelector("[data-countdown]");
    const actions = body.querySelector(".change-actions");
    if (actionsWatch && actions !== watched) {
      if (watched) actionsWatch.unobserve(watched);
      if (actions) actionsWatch.observe(actions);
      watched = actions;
      actionsInView = false;
    }
    if (bar) {
      bar.hidden = !waiting || actionsInView;
      document.body.classList.toggle("has-decision-bar", waiting);
      bar.querySelector("[data-decision-expiry]").textContent = !waiting ? "" : countdown
        ? "Discarded automatically in " + countdown.textContent + " s."
        : "It waits for good.";
    }
    const runId = change ? change.dataset.runId : "";
    if (waiting && announcer && announcedChange !== runId) {
      announcedChange = runId;
      announcer.textContent = "1 change waiting for Keep or Discard" +
        (countdown ? "; discarded automatically in " + countdown.textContent + " seconds." : ".");
    }
    if (badge && runId && badge.dataset.runId === runId) {
      badge.classList.toggle("status-awaiting", waiting);
      if (waiting) badge.textContent = "awaiting your decision";
      else if (badge.dataset.described) badge.textContent = badge.dataset.described;
    }
    const total = body.querySelector("[data-waiting-total]");
    const header = document.querySelector("[data-changes-waiting]");
    if (total && header) {
      const count = parseInt(total.dataset.waitingTotal, 10) || 0;
      header.hidden = count === 0;
      header.href = total.dataset.waitingUrl;
      header.textContent = count + (count === 1 ? " change" : " changes") + " waiting";
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
      if (mine === generation && answer.panel) swap(answer.panel);
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

  if (bar) {
    bar.addEventListener("click", function (event) {
      const button = event.target.closest("[data-decide]");
      if (!button) return;
      const form = body.querySelector('form[data-change-action="' + button.dataset.decide + '"]');
      if (form && !form.querySelector("button").disabled) form.requestSubmit();
    });
  }
  // The badge follows a run the page starts after this script ran (query.js sets it).
  document.addEventListener("undoable:run-status", function () { sync(); });

  setInterval(function () {
    const node = body.querySelector("[data-countdown]");
    if (node) node.textContent = String(Math.max(0, parseInt(node.textContent, 10) - 1));
    const expiry = bar && !bar.hidden && bar.querySelector("[data-decision-expiry]");
    if (node && expiry) expiry.textContent = "Discarded automatically in " + node.textContent + " s.";
  }, 1000);
  sync();
  schedulePoll();
})();
