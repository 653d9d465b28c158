// The query page's undo check: Rehearse posts the credentials the code needs (from this
// browser's store); the rehearsal runs in the background (webapp.actions.rehearsal_jobs), so
// the panel says "rehearsing" and polls its state until the verdict or a failure comes, for at
// most the server's UNDOABLE_REHEARSAL_WAIT_S (data-rehearsal-wait-s) and a margin. Typing in
// an editor marks the verdict stale.
(function () {
  "use strict";
  var panel = document.querySelector("[data-rehearsal]");
  if (!panel) return;
  var button = panel.querySelector("[data-rehearse]");
  var box = panel.querySelector("[data-rehearsal-verdict]");
  var names = (JSON.parse(document.getElementById("page-data").textContent || "{}").credentialNames) || [];
  var POLL_MS = 1000;
  // The server fails a job with no verdict after wait_s itself; this margin only covers a
  // server the page cannot reach.
  var WAIT_MARGIN_S = 15;
  var waitS = Number(panel.getAttribute("data-rehearsal-wait-s")) || 300;
  var edited = false;
  var pollTimer = null;

  function csrfToken() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function line(text, className) {
    var p = document.createElement("p");
    p.className = className || "";
    p.textContent = text;
    return p;
  }

  function show(verdict) {
    box.replaceChildren(line(verdict.message, verdict.restored ? "notice" : "notice error"));
    if (verdict.diff && verdict.diff.length) {
      var pre = document.createElement("pre");
      pre.className = "rehearsal-diff";
      pre.textContent = verdict.diff.map(function (item) {
        var text = (item.path || item.table) + ": " + item.change;
        if (item.what) text += " (" + item.what.join(", ") + ")";
        if (item.missing_rows && item.missing_rows.length) text += " missing " + item.missing_rows.join("; ");
        if (item.extra_rows && item.extra_rows.length) text += " extra " + item.extra_rows.join("; ");
        return text;
      }).join("\n");
      box.appendChild(pre);
    }
    var moved = Object.keys(verdict.counters || {});
    if (moved.length) {
      box.appendChild(line("Counters moved (not part of the verdict): " + moved.map(function (name) {
        return name + " " + verdict.counters[name].before + " → " + verdict.counters[name].after;
      }).join(", "), "hint"));
    }
  }

  function markStale() {
    var shown = box.querySelector("p");
    // Only a verdict goes stale: "rehearsing" and a failure carry a testid of their own.
    if (shown && !shown.hasAttribute("data-testid") && !box.querySelector("[data-stale]")) {
      var stale = document.createElement("em");
      stale.setAttribute("data-stale", "");
      stale.setAttribute("data-testid", "rehearsal-stale");
      stale.textContent = " (stale: the code changed since; rehearse again)";
      shown.appendChild(stale);
    }
  }

  function failed(message) {
    box.replaceChildren(line(message, "notice error"));
    box.firstChild.setAttribute("data-testid", "rehearsal-failed");
    button.disabled = false;
  }

  function rehearsing() {
    box.replaceChildren(line("Rehearsing on a throwaway copy…", "hint"));
    box.firstChild.setAttribute("data-testid", "rehearsing");
    button.disabled = true;
  }

  // One answer of the server: the job's state (webapp.actions.rehearsal_jobs.rehearsal_state).
  function settle(state, deadline) {
    if (state.state === "rehearsing") {
      if (Date.now() > deadline) {
        failed("No verdict within " + (waitS + WAIT_MARGIN_S) + " s: rehearse again.");
        return;
      }
      rehearsing();
      pollTimer = window.setTimeout(function () { poll(deadline); }, POLL_MS);
      return;
    }
    button.disabled = false;
    if (state.state === "failed") {
      failed(state.error);
    } else if (state.state === "done") {
      show(state.verdict);
      if (state.verdict.stale || edited) markStale();
    }
  }

  function poll(deadline) {
    fetch(panel.getAttribute("data-rehearsal-url"), { credentials: "same-origin" })
      .then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) throw new Error(body.error || response.statusText);
          settle(body, deadline);
        });
      }).catch(function (error) {
        failed("Could not read the rehearsal's state: " + error.message);
      });
  }

  function deadlineFromNow() {
    return Date.now() + (waitS + WAIT_MARGIN_S) * 1000;
  }

  button.addEventListener("click", function () {
    window.clearTimeout(pollTimer);
    edited = false;
    rehearsing();
    var credentials = window.UndoableCredentials ? window.UndoableCredentials.valuesFor(names) : {};
    fetch(panel.getAttribute("data-rehearse-url"), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify({ credentials: credentials }),
    }).then(function (response) {
      return response.json().then(function (body) {
        if (!response.ok) throw new Error(body.error || response.statusText);
        settle(body, deadlineFromNow());
      });
    }).catch(function (error) {
      failed("Could not rehearse: " + error.message);
    });
  });

  // A page opened while a rehearsal runs follows it too.
  if (panel.getAttribute("data-rehearsal-state") === "rehearsing") {
    settle({ state: "rehearsing" }, deadlineFromNow());
  }

  document.querySelectorAll("[data-editor]").forEach(function (editor) {
    editor.addEventListener("input", function () {
      edited = true;
      markStale();
    });
  });
})();
