// Follow one run over its websocket: replay after the last seq seen, then live. Duplicates
// (seq <= last seen) are dropped, so a reconnect or a reload shows every chunk exactly once.
// The socket reconnects with exponential backoff until the run reaches a final status; with
// handlers.stayOpen (an fs/db page) it stays open after that for the run's change events.
(function () {
  "use strict";
  var FINAL = { succeeded: 1, failed: 1, timed_out: 1, cancelled: 1 };

  function RunStream(wsPath, handlers) {
    this.wsPath = wsPath;
    this.handlers = handlers;
    this.lastSeq = 0;
    this.attempt = 0;
    this.closed = false;
    this.socket = null;
    this.timer = null;
    this._connect();
  }

  RunStream.prototype._url = function () {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    return scheme + window.location.host + this.wsPath + "?after=" + this.lastSeq;
  };

  RunStream.prototype._connect = function () {
    var self = this;
    var socket = new WebSocket(this._url());
    this.socket = socket;
    socket.onopen = function () {
      self.attempt = 0;
      if (self.handlers.onConnection) self.handlers.onConnection(true);
    };
    socket.onmessage = function (event) {
      var message = JSON.parse(event.data);
      if (message.type === "chunk") {
        if (message.seq <= self.lastSeq) return;
        self.lastSeq = message.seq;
        self.handlers.onChunk(message);
      } else if (message.type === "status") {
        self.handlers.onStatus(message);
        if (FINAL[message.status] && message.last_seq <= self.lastSeq && !self.handlers.stayOpen) self.close();
      } else if (message.type === "change") {
        if (self.handlers.onChange) self.handlers.onChange(message);
      }
    };
    socket.onclose = function () {
      if (self.socket !== socket || self.closed) return;
      if (self.handlers.onConnection) self.handlers.onConnection(false);
      var delay = Math.min(8000, 250 * Math.pow(2, self.attempt)) * (0.75 + Math.random() / 2);
      self.attempt += 1;
      self.timer = window.setTimeout(function () { self._connect(); }, delay);
    };
  };

  RunStream.prototype.close = function () {
    this.closed = true;
    window.clearTimeout(this.timer);
    if (this.socket && this.socket.readyState <= 1) this.socket.close();
  };

  RunStream.isFinal = function (status) {
    return !!FINAL[status];
  };

  window.UndoableRunStream = RunStream;
})();
