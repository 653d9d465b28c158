// The query page: two editors with autosave, Run/Stop, the live console, the run list, the
// "changed from generated" diffs, the Fix button and the guard on Propose again / Undo replace.
(function () {
  "use strict";
  var lib = window.UndoableEditor;
  var data = JSON.parse(document.getElementById("page-data").textContent);
  function jsonOf(id) { return JSON.parse(document.getElementById(id).textContent); }
  var generated = { forward: jsonOf("generated-forward-code"), reverse: jsonOf("generated-reverse-code") };
  // The code the last Fix replaced (kept by the server), so a reload still shows the fix's diff.
  var beforeFix = { forward: jsonOf("forward-code-before-fix"), reverse: jsonOf("reverse-code-before-fix") };
  var consoleView = new window.UndoableConsole(document.querySelector("[data-console]"));
  var badge = document.querySelector("[data-status-badge]");
  var stopButton = document.querySelector("[data-stop]");
  var fixButton = document.querySelector("[data-fix]");
  var fixNote = document.querySelector("[data-fix-note]");
  var saveState = document.querySelector("[data-save-state]");
  var runLabel = document.querySelector("[data-console-run]");
  var reasonBox = document.querySelector("[data-run-reason]");
  var goCredentials = reasonBox.querySelector("[data-go-credentials]");
  var runNeeds = document.querySelector("[data-run-needs]");
  var imagesBox = document.querySelector("[data-run-images]");
  var dark = window.UndoableTheme ? window.UndoableTheme.isDark() : false;
  var editors = {};
  var diffs = {};
  var diffBase = {
    forward: beforeFix.forward || generated.forward,
    reverse: beforeFix.reverse || generated.reverse,
  };
  var current = null; // {id, stream, cancelUrl, fixUrl, direction}

  function csrfToken() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function post(url, body, extra) {
    return fetch(url, Object.assign({
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(body || {}),
    }, extra || {})).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (json) {
        if (!response.ok) throw new Error(json.error || "The server answered " + response.status);
        return json;
      });
    });
  }

  // --- editors and autosave ---------------------------------------------------------------
  var saveTimer = null;
  var dirty = false;

  function codes() {
    return { forward_code: editors.forward.getValue(), reverse_code: editors.reverse.getValue() };
  }

  function save(keepalive) {
    window.clearTimeout(saveTimer);
    if (!dirty) return Promise.resolve();
    dirty = false;
    saveState.textContent = "Saving…";
    return post(data.saveUrl, codes(), keepalive ? { keepalive: true } : null).then(
      function () { saveState.textContent = "All changes saved"; },
      function (error) {
        dirty = true;
        saveState.textContent = "Not saved (" + error.message + "); retrying…";
        saveTimer = window.setTimeout(save, 3000);
      }
    );
  }

  function changed(side) {
    var tag = document.querySelector('[data-changed="' + side + '"]');
    var toggle = document.querySelector('[data-diff-toggle="' + side + '"]');
    var differs = diffBase[side] !== "" && diffBase[side] !== editors[side].getValue();
    var fromFix = beforeFix[side] !== "" && diffBase[side] === beforeFix[side];
    tag.hidden = !(differs && !fromFix && diffBase[side] === generated[side]);
    document.querySelector('[data-fixed="' + side + '"]').hidden = !(differs && fromFix);
    toggle.hidden = !differs && !diffs[side];
  }

  function onChange(side) {
    dirty = true;
    saveState.textContent = "Editing…";
    window.clearTimeout(saveTimer);
    saveTimer = window.setTimeout(save, 800);
    changed(side);
    if (diffs[side]) showDiff(side, true);
  }

  ["forward", "reverse"].forEach(function (side) {
    editors[side] = lib.createEditor(document.querySelector('[data-editor="' + side + '"]'), {
      doc: jsonOf(side + "-code"),
      language: "python",
      dark: dark,
      label: side === "forward" ? "Forward code" : "Reverse (undo) code",
      onChange: function () { onChange(side); },
      onRun: function () { startRun(side); },
    });
    changed(side);
  });

  document.addEventListener("undoable:theme-changed", function (event) {
    editors.forward.setDark(event.detail.dark);
    editors.reverse.setDark(event.detail.dark);
  });
  window.addEventListener("pagehide", function () { save(true); });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "hidden") save(true);
  });

  // --- Propose again / Undo replace -------------------------------------------------------
  // Both replace the editors' code (the server keeps what Propose again replaced). With edits in
  // the editors they ask first, and pending edits are saved before the form goes, so the kept
  // version has them and no late autosave can overwrite the new code.
  function edited() {
    return dirty || ["forward", "reverse"].some(function (side) {
      return editors[side].getValue() !== generated[side];
    });
  }

  document.querySelectorAll("[data-replace-form]").forEach(function (form) {
    var button = form.querySelector("button[type=submit]");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      if (button.disabled) return;
      if (edited() && !window.confirm(form.getAttribute("data-confirm"))) {
        saveState.textContent = "Nothing replaced: your code is as it was.";
        return;
      }
      button.disabled = true;
      save().then(function () {
        if (dirty) {
          button.disabled = false;
          saveState.textContent = "Nothing replaced: your edits could not be saved first.";
          return;
        }
        button.textContent = form.getAttribute("data-busy-label");
        // The model hears what the browser holds, as on the home page: names and scopes only.
        var names = form.querySelector("input[name=credential_names]");
        if (names && window.UndoableCredentials) names.value = window.UndoableCredentials.names().join(",");
        var connections = form.querySelector("input[name=connections]");
        if (connections && window.UndoableConnections) connections.value = JSON.stringify(window.UndoableConnections.forPrompt());
        form.submit();
      });
    });
  });

  // --- "changed from generated" / "before the fix" diffs ------------------------------------
  function showDiff(side, open) {
    var host = document.querySelector('[data-diff="' + side + '"]');
    var toggle = document.querySelector('[data-diff-toggle="' + side + '"]');
    if (diffs[side]) { diffs[side].destroy(); diffs[side] = null; }
    host.textContent = "";
    if (open) {
      diffs[side] = lib.createDiff(host, {
        original: diffBase[side], modified: editors[side].getValue(), language: "python", dark: dark,
      });
    }
    host.hidden = !open;
    toggle.setAttribute("aria-expanded", String(open));
    toggle.textContent = open ? "Hide changes" : "Show changes";
  }

  document.querySelectorAll("[data-diff-toggle]").forEach(function (toggle) {
    toggle.addEventListener("click", function () {
      var side = toggle.getAttribute("data-diff-toggle");
      showDiff(side, !diffs[side]);
    });
  });
  // After a reload the fix's diff is open again, as it was when the fix arrived.
  ["forward", "reverse"].forEach(function (side) {
    if (beforeFix[side] && beforeFix[side] !== editors[side].getValue()) showDiff(side, true);
  });

  // --- runs ---------------------------------------------------------------------------------
  function describe(status) {
    var text = status.status.replace("_", " ");
    if (status.exit_code !== null && status.exit_code !== undefined) text += " · exit " + status.exit_code;
    if (status.duration_ms !== null && status.duration_ms !== undefined) {
      text += " · " + (status.duration_ms < 1000 ? status.duration_ms + " ms" : (status.duration_ms / 1000).toFixed(1) + " s");
    }
    return text;
  }

  function showStatus(status) {
    var final = window.UndoableRunStream.isFinal(status.status);
    // A status read before the run ended (e.g. the Stop request's reply) may arrive after the
    // websocket already reported the end: never move a finished run back to running.
    if (current && current.final && !final) return;
    if (current) current.final = final;
    badge.className = "status-badge status-" + status.status;
    badge.textContent = badge.dataset.described = describe(status);
    badge.setAttribute("data-status", status.status);
    // static/workspaces/panel.js says "awaiting your decision" while this run's change waits.
    if (status.run_id !== undefined) badge.dataset.runId = String(status.run_id);
    stopButton.disabled = final;
    // The model can only help when the program itself failed, not a missing credential or a limit.
    if (fixButton) fixButton.hidden = !(final && status.failure === "program");
    showReason(final ? status : null);
    if (final) showImages(status);
    // A run refused before it started has its reason below the console: the console only
    // points there, so the two never contradict each other.
    var notStarted = status.failure === "missing_credential" || status.failure === "missing_scope";
    if (final && consoleView.isEmpty()) consoleView.hint(notStarted ? "The run did not start: see why below." : "This run printed nothing.");
    if (final) refreshRunList();
    announce("undoable:run-status", status);
  }

  // The workspace panel (static/workspaces/panel.js) follows the run through these events.
  function announce(name, detail) {
    document.dispatchEvent(new CustomEvent(name, { detail: detail }));
  }

  // Why the run did not succeed and the next step (the server words both: status.reason,
  // status.next_step); a missing credential also offers the way to the credentials panel.
  function showReason(status) {
    var kind = status && status.failure;
    reasonBox.hidden = !kind;
    reasonBox.setAttribute("data-failure", kind || "");
    reasonBox.querySelector("[data-run-reason-why]").textContent = kind ? status.reason : "";
    var toCard = kind === "missing_credential" || kind === "missing_scope";
    var next = reasonBox.querySelector("[data-run-reason-next]");
    next.textContent = kind ? status.next_step : "";
    // A missing credential's next step is the link itself: said once, not twice.
    next.hidden = kind === "missing_credential";
    goCredentials.hidden = !toCard;
    goCredentials.textContent = kind === "missing_scope" ? "Go to the Connections panel" : "Add it in the Credentials card, then run again";
  }

  // The images a finished run left in its output folder, as <img> only: an SVG's scripts never
  // run there (and its URL answers with a sandboxing CSP when opened on its own).
  function showImages(status) {
    var images = status.images || [];
    if (imagesBox.getAttribute("data-run") === String(status.run_id)) return;
    imagesBox.textContent = "";
    images.forEach(function (image, index) {
      var figure = document.createElement("figure");
      figure.className = "run-image";
      var img = document.createElement("img");
      img.src = image.url;
      img.alt = "Figure " + (index + 1) + " from run #" + status.run_id + ": " + image.name;
      img.loading = "lazy";
      var caption = document.createElement("figcaption");
      caption.textContent = image.name;
      figure.appendChild(img);
      figure.appendChild(caption);
      imagesBox.appendChild(figure);
    });
    imagesBox.setAttribute("data-run", String(status.run_id));
    imagesBox.hidden = images.length === 0;
  }

  function clearImages() {
    imagesBox.textContent = "";
    imagesBox.removeAttribute("data-run");
    imagesBox.hidden = true;
  }

  function toCredentials(event) {
    var card = document.getElementById("credentials");
    var name = card.querySelector("[data-credential-input-name]");
    var value = card.querySelector("[data-credential-input-value]");
    if (!name) return;
    event.preventDefault();
    card.scrollIntoView({ block: "center" });
    var missing = window.UndoableCredentials ? window.UndoableCredentials.missing(data.credentialNames || []) : [];
    if (missing.length && !name.value) name.value = missing[0];
    (name.value ? value : name).focus();
  }
  document.querySelectorAll("[data-go-credentials]").forEach(function (link) {
    link.addEventListener("click", toCredentials);
  });

  // A run needs every credential its query names: while one is not in this browser, Run is off
  // and says which, beside it (the server refuses such a run too, and creates none).
  function missingCredentials() {
    return window.UndoableCredentials ? window.UndoableCredentials.missing(data.credentialNames || []) : [];
  }

  function showRunNeeds(missing) {
    runNeeds.hidden = missing.length === 0;
    runNeeds.querySelector("[data-run-needs-names]").textContent = missing.join(", ");
    document.querySelectorAll("[data-run]").forEach(function (b) { b.disabled = missing.length > 0; });
  }
  document.addEventListener("undoable:credentials-changed", function () { showRunNeeds(missingCredentials()); });

  function follow(run) {
    if (current && current.stream) current.stream.close();
    consoleView.reset("Waiting for output…");
    clearImages();
    runLabel.textContent = "· run #" + run.run.run_id + " (" + (run.direction || "forward") + ")";
    current = { id: run.run.run_id, cancelUrl: run.cancel_url, fixUrl: run.fix_url, direction: run.direction || "forward" };
    showStatus(run.run);
    current.stream = new window.UndoableRunStream(run.ws_path, {
      onChunk: function (chunk) {
        // Output means the run has started, even if its "running" status is still on its way.
        if (badge.getAttribute("data-status") === "queued") showStatus({ status: "running" });
        consoleView.write(chunk.stream, chunk.text);
      },
      onStatus: showStatus,
      // An fs/db run's change is kept or discarded after the run ended: keep listening.
      stayOpen: !!document.querySelector("[data-workspace-panel][data-changes]"),
      onChange: function (change) { announce("undoable:change", change); },
      onConnection: function (connected) { announce("undoable:run-socket", { connected: connected }); },
    });
  }

  // An action the model marked irreversible runs forward only after the person types the
  // phrase; the server checks it again (and answers 400, shown below the editors, if it is wrong).
  function confirmation(side) {
    if (side !== "forward" || data.reversible) return "";
    return window.prompt(
      'This action may not be undoable; undo is best effort. Type "' + data.confirmPhrase + '" to run it.'
    );
  }

  function startRun(side) {
    var missing = missingCredentials();
    if (missing.length) {
      showRunNeeds(missing);
      return Promise.resolve();
    }
    var confirm = confirmation(side);
    if (confirm === null) {
      saveState.textContent = "Not run: the run was not confirmed.";
      return Promise.resolve();
    }
    window.clearTimeout(saveTimer);
    dirty = false;
    var names = data.credentialNames || [];
    var body = codes();
    body.direction = side;
    if (confirm) body.confirm = confirm;
    body.credentials = window.UndoableCredentials ? window.UndoableCredentials.valuesFor(names) : {};
    // Which scopes a connected service granted each token (checked by the server before running).
    body.grants = window.UndoableConnections ? window.UndoableConnections.grantsFor(names) : {};
    document.querySelectorAll("[data-run]").forEach(function (b) { b.disabled = true; });
    return post(data.runUrl, body).then(function (response) {
      saveState.textContent = "All changes saved";
      response.direction = side;
      follow(response);
      refreshRunList();
    }, function (error) {
      saveState.textContent = "Could not start the run: " + error.message;
    }).then(function () {
      showRunNeeds(missingCredentials());
    });
  }

  // The buttons come disabled from the server: a click before this script ran would do nothing.
  document.querySelectorAll("[data-run]").forEach(function (button) {
    button.addEventListener("click", function () { startRun(button.getAttribute("data-run")); });
  });
  showRunNeeds(missingCredentials());

  stopButton.addEventListener("click", function () {
    if (!current) return;
    stopButton.disabled = true;
    post(current.cancelUrl).then(function (response) { showStatus(response.run); }, function (error) {
      stopButton.disabled = false;
      saveState.textContent = "Could not stop: " + error.message;
    });
  });

  document.querySelector("[data-copy]").addEventListener("click", function () {
    consoleView.copy().then(function () { saveState.textContent = "Output copied as plain text"; });
  });

  if (fixButton) {
    fixButton.addEventListener("click", function () {
      if (!current) return;
      var side = current.direction;
      fixButton.disabled = true;
      fixNote.hidden = false;
      fixNote.textContent = "Asking the model for a fix…";
      post(current.fixUrl).then(function (fix) {
        diffBase[side] = beforeFix[side] = fix.previous;
        editors[side].setValue(fix.code);
        showDiff(side, true);
        fixNote.textContent = "The model's fix replaced the " + side + " code; the diff shows what changed. " + (fix.explanation || "");
      }, function (error) {
        fixNote.textContent = "Fix failed: " + error.message;
      }).then(function () { fixButton.disabled = false; });
    });
  }

  // --- the run list -------------------------------------------------------------------------
  var runList = document.querySelector("[data-run-list]");
  function refreshRunList() {
    fetch(data.runListUrl, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
      runList.innerHTML = html;
    });
  }
  // The list names each run's change: it follows a Keep or Discard as the panel does.
  document.addEventListener("undoable:change", refreshRunList);
  runList.addEventListener("click", function (event) {
    var button = event.target.closest("[data-show-run]");
    if (!button) return;
    fetch(button.getAttribute("data-show-run"), { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(follow);
  });

  // A reload mid-run (or after one) picks the latest run up again: replay, then live.
  if (data.latestRun) {
    fetch(data.latestRunUrl, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(follow);
  }
})();
