/*
 * Undoable credentials panel: named secrets kept ONLY in this browser's localStorage.
 *
 * Agreement with the query page (issue 3) and every page that starts runs:
 *   window.UndoableCredentials.valuesFor(names) -> {name: value}   only the stored names asked for
 *   window.UndoableCredentials.missing(names)   -> [name, ...]      asked-for names not stored
 *   window.UndoableCredentials.names()          -> [name, ...]      every stored name, sorted
 *   document fires "undoable:credentials-changed" after an add or a remove; a page that edits
 *   the query's names updates [data-credential-needed="A,B"] and fires it to refresh the panel.
 * A run request carries valuesFor(query.credential_names) and nothing else, for that run only.
 *
 * A plain HTML form that starts a run (history "Re-run") opts in with
 *   <form data-attach-credentials data-credential-names="SLACK_TOKEN,DB_URL">
 * and gets hidden inputs named "credential:SLACK_TOKEN" added just before it is submitted.
 *
 * Values are never put in the DOM after entry: the list shows names and a fixed mask.
 */
(function () {
  "use strict";
  if (window.UndoableCredentials) return; // the partial may be included twice on one page

  var STORAGE_KEY = "undoable.credentials.v1";
  var NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
  var MASKED = "\u2022\u2022\u2022\u2022\u2022\u2022\u2022\u2022";

  function load() {
    try {
      var parsed = JSON.parse(window.localStorage.getItem(STORAGE_KEY) || "{}");
      return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : {};
    } catch (err) {
      return {};
    }
  }

  function save(all) {
    window.localStorage.setItem(STORAGE_KEY, JSON.stringify(all));
    document.dispatchEvent(new CustomEvent("undoable:credentials-changed"));
  }

  function asList(names) {
    return Array.isArray(names) ? names : [];
  }

  var api = {
    names: function () {
      return Object.keys(load()).sort();
    },
    valuesFor: function (names) {
      var all = load();
      var out = {};
      asList(names).forEach(function (name) {
        if (typeof all[name] === "string" && all[name] !== "") out[name] = all[name];
      });
      return out;
    },
    missing: function (names) {
      var all = load();
      return asList(names).filter(function (name) {
        return !(typeof all[name] === "string" && all[name] !== "");
      });
    },
    set: function (name, value) {
      if (!NAME_RE.test(name)) throw new Error("A credential name is letters, digits and _.");
      if (!value) throw new Error("A credential needs a value.");
      var all = load();
      all[name] = value;
      save(all);
    },
    remove: function (name) {
      var all = load();
      delete all[name];
      save(all);
    },
  };
  window.UndoableCredentials = api;

  // Names travel in data attributes as "A,B" (names never contain commas).
  function parseNames(raw) {
    return (raw || "")
      .split(",")
      .map(function (name) {
        return name.trim();
      })
      .filter(Boolean);
  }

  function renderPanel(panel) {
    var list = panel.querySelector("[data-credential-list]");
    var empty = panel.querySelector("[data-credential-empty]");
    var names = api.names();
    list.replaceChildren();
    names.forEach(function (name) {
      var item = document.createElement("li");
      item.className = "credential-item";
      item.dataset.credentialName = name;
      var label = document.createElement("code");
      label.textContent = name;
      var value = document.createElement("span");
      value.className = "credential-masked";
      value.textContent = MASKED;
      var remove = document.createElement("button");
      remove.type = "button";
      remove.className = "button small";
      remove.textContent = "Remove";
      remove.setAttribute("aria-label", "Remove " + name);
      remove.addEventListener("click", function () {
        api.remove(name);
      });
      item.append(label, value, remove);
      list.append(item);
    });
    empty.hidden = names.length > 0;
    renderNeeded(panel);
  }

  function renderNeeded(panel) {
    var box = panel.querySelector("[data-credential-needed]");
    if (!box) return;
    var needed = parseNames(box.dataset.credentialNeeded);
    var missing = api.missing(needed);
    box.replaceChildren();
    needed.forEach(function (name) {
      var tag = document.createElement("span");
      var absent = missing.indexOf(name) !== -1;
      tag.className = "credential-tag" + (absent ? " missing" : "");
      tag.textContent = name + (absent ? " (missing)" : " \u2713");
      box.append(tag);
    });
  }

  function bindPanel(panel) {
    var form = panel.querySelector("[data-credential-form]");
    var error = panel.querySelector("[data-credential-error]");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var nameInput = form.querySelector("[data-credential-input-name]");
      var valueInput = form.querySelector("[data-credential-input-value]");
      try {
        api.set(nameInput.value.trim(), valueInput.value);
        error.textContent = "";
        form.reset();
        nameInput.focus();
      } catch (err) {
        error.textContent = err.message;
      }
    });
    document.addEventListener("undoable:credentials-changed", function () {
      renderPanel(panel);
    });
    window.addEventListener("storage", function (event) {
      if (event.key === STORAGE_KEY) renderPanel(panel);
    });
    renderPanel(panel);
  }

  function attachToForm(form) {
    form.addEventListener("submit", function () {
      form.querySelectorAll("input[data-attached-credential]").forEach(function (old) {
        old.remove();
      });
      var values = api.valuesFor(parseNames(form.dataset.credentialNames));
      Object.keys(values).forEach(function (name) {
        var input = document.createElement("input");
        input.type = "hidden";
        input.name = "credential:" + name;
        input.value = values[name];
        input.dataset.attachedCredential = "";
        form.append(input);
      });
    });
  }

  function init() {
    document.querySelectorAll("[data-credentials-panel]").forEach(bindPanel);
    document.querySelectorAll("form[data-attach-credentials]").forEach(attachToForm);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
