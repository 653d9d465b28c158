// The workspace panel: refresh it while a run or a choice is open, tick the rollback
// countdown, and ask for typed confirmation before running an irreversible action.
(function () {
  "use strict";
  const panel = document.querySelector("[data-workspace-panel]");
  if (!panel) return;
  const body = panel.querySelector("[data-panel-body]");
  const url = panel.dataset.panelUrl;
  const CONFIRM_WORD = "run anyway";
  let timer = null;

  function isOpen() {
    const change = body.querySelector("[data-change-status]");
    const badge = document.querySelector("[data-status-badge]");
    const running = badge && /queued|running/.test(badge.textContent || "");
    return running || (change && change.dataset.open === "true");
  }

  async function refresh() {
    try {
      const response = await fetch(url, { headers: { "X-Requested-With": "fetch" } });
      if (response.ok) body.innerHTML = await response.text();
    } catch (err) {
      // A missed refresh is retried on the next tick.
    }
    schedule();
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, isOpen() ? 1000 : 4000);
  }

  function tick() {
    const node = body.querySelector("[data-countdown]");
    if (node) {
      const left = Math.max(0, parseInt(node.textContent, 10) - 1);
      node.textContent = String(left);
    }
  }

  document.addEventListener(
    "click",
    function (event) {
      const button = event.target.closest('[data-run="forward"]');
      if (!button || panel.dataset.reversible !== "false") return;
      const typed = window.prompt(
        'This action may not be undoable; undo is best effort. Type "' + CONFIRM_WORD + '" to run it.'
      );
      if ((typed || "").trim().toLowerCase() !== CONFIRM_WORD) {
        event.preventDefault();
        event.stopImmediatePropagation();
      } else {
        setTimeout(refresh, 500);
      }
    },
    true
  );
  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-run]")) setTimeout(refresh, 500);
  });
  setInterval(tick, 1000);
  schedule();
})();
