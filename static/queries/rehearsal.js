// The query page's undo check: Rehearse posts the credentials the code needs (from this
// browser's store) and shows the verdict; typing in an editor marks the verdict stale.
(function () {
  "use strict";
  var panel = document.querySelector("[data-rehearsal]");
  if (!panel) return;
  var button = panel.querySelector("[data-rehearse]");
  var box = panel.querySelector("[data-rehearsal-verdict]");
  var names = (JSON.parse(document.getElementById("page-data").textContent || "{}").credentialNames) || [];

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

  button.addEventListener("click", function () {
    button.disabled = true;
    box.replaceChildren(line("Rehearsing on a throwaway copy…", "hint"));
    var credentials = window.UndoableCredentials ? window.UndoableCredentials.valuesFor(names) : {};
    fetch(panel.getAttribute("data-rehearse-url"), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify({ credentials: credentials }),
    }).then(function (response) {
      return response.json().then(function (body) {
        if (!response.ok) throw new Error(body.error || response.statusText);
        show(body);
      });
    }).catch(function (error) {
      box.replaceChildren(line("Could not rehearse: " + error.message, "notice error"));
    }).then(function () { button.disabled = false; });
  });

  document.querySelectorAll("[data-editor]").forEach(function (editor) {
    editor.addEventListener("input", function () {
      var shown = box.querySelector("p");
      if (shown && !box.querySelector("[data-stale]")) {
        var stale = document.createElement("em");
        stale.setAttribute("data-stale", "");
        stale.textContent = " (stale: the code changed since; rehearse again)";
        shown.appendChild(stale);
      }
    });
  });
})();
