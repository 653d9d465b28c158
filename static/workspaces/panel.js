// The workspace panel: refresh it while a run or a choice is open and tick the rollback
// countdown. (The typed confirmation of an irreversible run is asked by query.js, for every
// kind, and checked by the server.)
(function () {
  "use strict";
  const panel = document.querySelector("[data-workspace-panel]");
  if (!panel) return;
  const body = panel.querySelector("[data-panel-body]");
  const url = panel.dataset.panelUrl;
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

  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-run]")) setTimeout(refresh, 500);
  });
  setInterval(tick, 1000);
  schedule();
})();
