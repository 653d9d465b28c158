// Light/dark: follows the system (prefers-color-scheme) until the person picks one with the
// toggle; the choice is kept in localStorage. Loaded in <head> so the first paint is right.
(function () {
  "use strict";
  var KEY = "undoable.theme";
  var root = document.documentElement;
  var media = window.matchMedia("(prefers-color-scheme: dark)");

  function saved() {
    try {
      return window.localStorage.getItem(KEY);
    } catch (err) {
      return null;
    }
  }

  function isDark() {
    var choice = root.getAttribute("data-theme");
    return choice ? choice === "dark" : media.matches;
  }

  function announce() {
    var dark = isDark();
    document.querySelectorAll("[data-theme-toggle]").forEach(function (button) {
      button.setAttribute("aria-pressed", String(dark));
      var label = button.querySelector("[data-theme-label]");
      if (label) label.textContent = dark ? "Light" : "Dark";
    });
    document.dispatchEvent(new CustomEvent("undoable:theme-changed", { detail: { dark: dark } }));
  }

  var choice = saved();
  if (choice === "dark" || choice === "light") root.setAttribute("data-theme", choice);

  window.UndoableTheme = { isDark: isDark };
  media.addEventListener("change", announce);
  document.addEventListener("DOMContentLoaded", function () {
    announce();
    document.querySelectorAll("[data-theme-toggle]").forEach(function (button) {
      button.addEventListener("click", function () {
        var next = isDark() ? "light" : "dark";
        root.setAttribute("data-theme", next);
        try {
          window.localStorage.setItem(KEY, next);
        } catch (err) {
          /* private mode: the choice lasts for this page only */
        }
        announce();
      });
    });
  });
})();
