/*
 * Connections panel: OAuth 2.0 sign-in (authorization code + PKCE, in a popup) to the services
 * the server has clients for. Tokens live only in this browser:
 *   - the access token in the credentials store (window.UndoableCredentials) under the
 *     provider's credential name (SLACK_TOKEN, GITHUB_TOKEN, GOOGLE_TOKEN, ...), so a run gets it
 *     like any credential;
 *   - the refresh token, granted scopes and the server's grant receipt under
 *     localStorage["undoable.connections.v1"].
 * The server starts the sign-in (signs `state`), trades the code for the token (it holds the
 * client secret), refreshes and revokes; it keeps nothing.
 *
 * For pages that start runs or ask for a proposal:
 *   window.UndoableConnections.grantsFor(names) -> {credential: receipt}   for a run request
 *   window.UndoableConnections.forPrompt()      -> [{credential, scopes}]  names and scopes only
 */
(function () {
  "use strict";
  if (window.UndoableConnections) return;

  var STORAGE_KEY = "undoable.connections.v1";
  var CHANNEL = "undoable-oauth";

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
    document.dispatchEvent(new CustomEvent("undoable:connections-changed"));
  }

  function credentials() {
    return window.UndoableCredentials;
  }

  var api = {
    all: load,
    grantsFor: function (names) {
      var out = {};
      var all = load();
      Object.keys(all).forEach(function (id) {
        var entry = all[id];
        if ((names || []).indexOf(entry.credential) !== -1 && entry.grant) {
          out[entry.credential] = entry.grant;
        }
      });
      return out;
    },
    forPrompt: function () {
      var all = load();
      return Object.keys(all).map(function (id) {
        return { credential: all[id].credential, scopes: all[id].scopes || [] };
      });
    },
  };
  window.UndoableConnections = api;

  function csrfToken() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      cache: "no-store",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(body),
    }).then(function (response) {
      return response
        .json()
        .catch(function () {
          return { error: "The server answered HTTP " + response.status + "." };
        })
        .then(function (data) {
          if (!response.ok) throw new Error(data.error || "HTTP " + response.status);
          return data;
        });
    });
  }

  function base64url(bytes) {
    var text = "";
    bytes.forEach(function (b) {
      text += String.fromCharCode(b);
    });
    return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // RFC 7636: a 43-character verifier from 32 random bytes, and its S256 challenge.
  function pkcePair() {
    var verifier = base64url(window.crypto.getRandomValues(new Uint8Array(32)));
    return window.crypto.subtle
      .digest("SHA-256", new TextEncoder().encode(verifier))
      .then(function (digest) {
        return { verifier: verifier, challenge: base64url(new Uint8Array(digest)) };
      });
  }

  function remember(provider, answer) {
    credentials().set(answer.credential, answer.access_token);
    var all = load();
    all[provider.id] = {
      credential: answer.credential,
      scopes: answer.scopes,
      grant: answer.grant,
      refresh_token: answer.refresh_token || "",
      expires_at: answer.expires_in ? Date.now() + answer.expires_in * 1000 : null,
    };
    save(all);
  }

  function forget(provider) {
    var all = load();
    var entry = all[provider.id];
    delete all[provider.id];
    if (entry) credentials().remove(entry.credential);
    save(all);
  }

  // One sign-in at a time per page; the popup's answer arrives on the channel with its state.
  var pending = null;

  function bindProvider(item, provider, urls) {
    var message = item.querySelector("[data-connection-message]");
    var state = item.querySelector("[data-connection-state]");
    var connect = item.querySelector("[data-connection-connect]");
    var refresh = item.querySelector("[data-connection-refresh]");
    var revoke = item.querySelector("[data-connection-revoke]");

    function say(text, isError) {
      message.textContent = text;
      message.classList.toggle("error", Boolean(isError));
    }

    function render() {
      var entry = load()[provider.id];
      var has = entry && !credentials().missing([entry.credential]).length;
      state.textContent = has
        ? "Connected as " + entry.credential + ", granted: " + entry.scopes.join(", ")
        : "Not connected.";
      item.dataset.connected = has ? "yes" : "no";
      refresh.hidden = !(has && entry.refresh_token);
      revoke.hidden = !has;
      connect.textContent = (has ? "Connect " + provider.name + " again" : "Connect " + provider.name);
    }

    function chosenScopes() {
      return Array.prototype.map.call(
        item.querySelectorAll("[data-connection-scope]:checked"),
        function (box) {
          return box.value;
        }
      );
    }

    connect.addEventListener("click", function () {
      var scopes = chosenScopes();
      if (!scopes.length) {
        say("Choose at least one scope.", true);
        return;
      }
      // Opened now, while the click still counts as the person's, then sent to the provider.
      var popup = window.open("about:blank", "undoable-oauth", "popup,width=520,height=680");
      say("Waiting for " + provider.name + " in the sign-in window…");
      pkcePair()
        .then(function (pair) {
          return post(urls.begin, { scopes: scopes, code_challenge: pair.challenge }).then(
            function (data) {
              pending = {
                provider: provider,
                verifier: pair.verifier,
                state: new URL(data.authorize_url).searchParams.get("state"),
                finish: finish,
                say: say,
              };
              if (popup) popup.location.href = data.authorize_url;
              else window.location.assign(data.authorize_url);
            }
          );
        })
        .catch(function (err) {
          if (popup) popup.close();
          say(err.message, true);
        });
    });

    function finish(answer, verifier) {
      if (answer.error) {
        say(
          provider.name + " answered: " + answer.error +
            (answer.error_description ? " (" + answer.error_description + ")" : "") +
            ". Nothing was stored.",
          true
        );
        return;
      }
      post(urls.token, { code: answer.code, state: answer.state, code_verifier: verifier })
        .then(function (data) {
          remember(provider, data);
          say("Connected.");
        })
        .catch(function (err) {
          say(err.message, true);
        });
    }

    refresh.addEventListener("click", function () {
      var entry = load()[provider.id];
      if (!entry) return;
      post(urls.refresh, { refresh_token: entry.refresh_token, grant: entry.grant })
        .then(function (data) {
          remember(provider, data);
          say("Token refreshed.");
        })
        .catch(function (err) {
          say(err.message, true);
        });
    });

    revoke.addEventListener("click", function () {
      var entry = load()[provider.id];
      if (!entry) return;
      var token = credentials().valuesFor([entry.credential])[entry.credential];
      var asked = provider.revocable && token ? post(urls.revoke, { token: token }) : Promise.resolve({ revoked: false });
      // Gone from this browser whatever the provider answers: that part is ours to decide.
      asked
        .then(function (data) {
          forget(provider);
          say(data.revoked ? "Revoked at " + provider.name + " and removed from this browser." : "Removed from this browser.");
        })
        .catch(function (err) {
          forget(provider);
          say("Removed from this browser, but " + err.message, true);
        });
    });

    document.addEventListener("undoable:connections-changed", render);
    document.addEventListener("undoable:credentials-changed", render);
    render();
  }

  function init() {
    var panel = document.querySelector("[data-connections-panel]");
    var data = document.getElementById("undoable-oauth-providers");
    if (!panel || !data || !credentials()) return;
    var providers = JSON.parse(data.textContent || "[]");
    providers.forEach(function (provider) {
      var item = panel.querySelector('[data-connection="' + provider.id + '"]');
      var base = "/connections/" + provider.id + "/";
      bindProvider(item, provider, {
        begin: base + "begin",
        token: base + "token",
        refresh: base + "refresh",
        revoke: base + "revoke",
      });
    });
    if (!("BroadcastChannel" in window)) return;
    new BroadcastChannel(CHANNEL).addEventListener("message", function (event) {
      var answer = event.data || {};
      if (answer.type !== "undoable:oauth-answer" || !pending) return;
      if (answer.state !== pending.state) return; // another tab's sign-in, or a forged answer
      var current = pending;
      pending = null;
      current.finish(answer, current.verifier);
    });
    // The provider's own error page (e.g. an unregistered redirect URI) never answers us, and
    // the sign-in window's opener link is cut: when the person comes back without an answer, say
    // what happened and what to do instead of waiting for ever.
    window.addEventListener("focus", function () {
      var waiting = pending;
      if (!waiting) return;
      window.setTimeout(function () {
        if (pending !== waiting) return;
        waiting.say(
          "No answer from " + waiting.provider.name + ". If its window showed an error or was " +
            "closed, nothing was stored: fix what it said, or press Connect again.",
          true
        );
      }, 1500);
    });
    window.addEventListener("storage", function (event) {
      if (event.key === STORAGE_KEY) document.dispatchEvent(new CustomEvent("undoable:connections-changed"));
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
