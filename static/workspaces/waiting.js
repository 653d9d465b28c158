// The header's "N changes waiting", live on every page: the server sends the count over
// ws/changes-waiting/ when the page opens and each time one of this person's changes moves
// (an agent's action waiting, a Keep, a Discard, a timeout). Other parts of the page (the
// Review page) hear it as the "undoable:waiting" event. Reconnects with backoff, like the run
// socket.
(function () {
  "use strict";
  var header = document.querySelector("[data-changes-waiting]");
  if (!header || !("WebSocket" in window)) return;
  var attempt = 0;

  function show(message) {
    var count = message.count;
    header.hidden = count === 0;
    header.href = message.url;
    header.textContent = count + (count === 1 ? " change" : " changes") + " waiting";
    header.dataset.live = "true"; // the count is the server's latest, kept live from now on
    document.dispatchEvent(new CustomEvent("undoable:waiting", { detail: message }));
  }

  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + window.location.host + "/ws/changes-waiting/");
    socket.onopen = function () { attempt = 0; };
    socket.onmessage = function (event) {
      var message = JSON.parse(event.data);
      if (message.type === "waiting") show(message);
    };
    socket.onclose = function (event) {
      if (event.code === 4401 || event.code === 4403) return; // signed out: nothing to count
      var delay = Math.min(8000, 250 * Math.pow(2, attempt)) * (0.75 + Math.random() / 2);
      attempt += 1;
      window.setTimeout(connect, delay);
    };
  }
  connect();
})();
