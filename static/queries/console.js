// The live output console: ANSI colours (ansi_up), `\r` rewrites the current line like a
// terminal (progress bars), stderr and our own system lines styled apart, copy as plain text.
(function () {
  "use strict";

  // The page's hint ("Run the forward code…") stays until there is output to show: a reset
  // replaces it by another hint, and the first write clears it.
  // ansi_up draws colours but would print other terminal commands as text: an OSC sequence
  // (ESC ] ... ended by BEL or ESC \, e.g. a window title or a hyperlink target) is dropped,
  // also when a chunk ends inside it. Like xterm, an unended one gives up after OSC_MAX chars.
  var OSC_MAX = 4096;

  function OscFilter() {
    this.inside = false;
    this.seen = 0;
    this.carry = "";
  }

  OscFilter.prototype.pass = function (text) {
    text = this.carry + text;
    this.carry = "";
    var out = "";
    var i = 0;
    while (i < text.length) {
      if (!this.inside) {
        var start = text.indexOf("\x1b]", i);
        if (start < 0) {
          // A lone ESC at the end may begin an OSC in the next chunk: hold it back.
          var end = text.charAt(text.length - 1) === "\x1b" ? text.length - 1 : text.length;
          out += text.slice(i, end);
          this.carry = text.slice(end);
          break;
        }
        out += text.slice(i, start);
        this.inside = true;
        this.seen = 0;
        i = start + 2;
        continue;
      }
      var bel = text.indexOf("\x07", i);
      var esc = text.indexOf("\x1b", i);
      var stop = bel < 0 ? esc : esc < 0 ? bel : Math.min(bel, esc);
      if (stop < 0) {
        this.seen += text.length - i;
        if (this.seen > OSC_MAX) this.inside = false;
        break;
      }
      this.seen += stop - i;
      if (text.charAt(stop) === "\x07") {
        this.inside = false;
        i = stop + 1;
      } else if (stop + 1 === text.length) {
        this.carry = "\x1b";
        break;
      } else {
        this.inside = text.charAt(stop + 1) !== "\\";
        i = stop + (this.inside ? 1 : 2);
      }
      if (this.inside && this.seen > OSC_MAX) this.inside = false;
    }
    return out;
  };

  function OutputConsole(element) {
    this.el = element;
    this.osc = {}; // one filter per stream: stderr may interleave inside an stdout sequence
    this.ansi = new window.UndoableEditor.AnsiUp();
    this.ansi.use_classes = false;
    this.line = null;
    this.placeholder = element.querySelector(".console-empty");
  }

  OutputConsole.prototype.reset = function (hint) {
    this.el.textContent = "";
    this.osc = {};
    this.ansi = new window.UndoableEditor.AnsiUp();
    this.ansi.use_classes = false;
    this.line = null;
    this.hint(hint || "");
  };

  OutputConsole.prototype.hint = function (text) {
    if (!this.isEmpty()) return;
    if (!this.placeholder) {
      this.placeholder = document.createElement("span");
      this.placeholder.className = "console-empty";
    }
    this.placeholder.textContent = text;
    if (text && !this.placeholder.parentNode) this.el.appendChild(this.placeholder);
    if (!text && this.placeholder.parentNode) this.el.removeChild(this.placeholder);
  };

  OutputConsole.prototype.isEmpty = function () {
    return this.line === null;
  };

  OutputConsole.prototype._newLine = function () {
    var line = document.createElement("span");
    line.className = "console-line";
    this.el.appendChild(line);
    return line;
  };

  // Append `text` from `stream` (stdout | stderr | system).
  OutputConsole.prototype.write = function (stream, text) {
    if (!this.osc[stream]) this.osc[stream] = new OscFilter();
    text = this.osc[stream].pass(text);
    if (!text) return;
    if (this.line === null) {
      if (this.placeholder && this.placeholder.parentNode) this.el.removeChild(this.placeholder);
      this.line = this._newLine();
    }
    var stick = this.el.scrollTop + this.el.clientHeight >= this.el.scrollHeight - 8;
    var parts = text.split(/(\r\n|\r|\n)/);
    for (var i = 0; i < parts.length; i++) {
      var part = parts[i];
      if (part === "\n" || part === "\r\n") {
        this.line.appendChild(document.createTextNode("\n"));
        this.line = this._newLine();
      } else if (part === "\r") {
        // Carriage return: what follows overwrites the line, as in a terminal.
        this.line.textContent = "";
      } else if (part) {
        var span = document.createElement("span");
        span.className = stream;
        span.innerHTML = this.ansi.ansi_to_html(part); // ansi_up escapes HTML in the text
        this.line.appendChild(span);
      }
    }
    if (stick) this.el.scrollTop = this.el.scrollHeight;
  };

  OutputConsole.prototype.plainText = function () {
    return this.isEmpty() ? "" : this.el.textContent;
  };

  OutputConsole.prototype.copy = function () {
    var text = this.plainText();
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    document.body.removeChild(area);
    return Promise.resolve();
  };

  window.UndoableConsole = OutputConsole;
  window.UndoableConsole.OscFilter = OscFilter;
})();
