"""A real local HTTP server that behaves like the part of Slack's Web API our tests use.

    with FakeSlackServer(token="xoxb-test") as slack:
        ... code in the sandbox calls f"{slack.base_url}/chat.postMessage" with the token ...
        message = slack.wait_for_message(lambda m: m["text"] == "hi", timeout_s=10)
        slack.wait_for_deleted(message["ts"], timeout_s=10)

Endpoints (all answer HTTP 200 with {"ok": ...} like Slack; a missing token is `not_authed`,
a wrong one `invalid_auth`):
  POST /api/chat.postMessage   {channel, text}   -> {"ok": true, "channel", "ts", "message"}
  POST /api/chat.delete        {channel, ts}     -> {"ok": true, "channel", "ts"}
  GET  /api/conversations.history?channel=C      -> {"ok": true, "messages": [newest first]}
Bodies may be JSON or form-encoded. Thread-safe; waits use a Condition, never sleep.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

Message = dict[str, Any]


class FakeSlackServer:
    def __init__(self, *, token: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.token = token
        self._cond = threading.Condition()
        self._messages: list[Message] = []  # live messages, oldest first
        self._deleted: list[Message] = []
        self._calls: list[tuple[str, str, bool]] = []  # (method, path, authorized)
        self._next_ts = 0
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/api"

    def messages(self, channel: str | None = None) -> list[Message]:
        with self._cond:
            return [dict(m) for m in self._messages if channel in (None, m["channel"])]

    def deleted(self) -> list[Message]:
        with self._cond:
            return [dict(m) for m in self._deleted]

    def calls(self) -> list[tuple[str, str, bool]]:
        with self._cond:
            return list(self._calls)

    def wait_for_message(self, match: Callable[[Message], bool], *, timeout_s: float) -> Message:
        """The first live message `match` accepts; TimeoutError if none arrives in time."""
        with self._cond:
            found = self._cond.wait_for(
                lambda: next((m for m in self._messages if match(m)), None), timeout=timeout_s
            )
            if found is None:
                raise TimeoutError(f"no matching message; have {self._messages!r}")
            return dict(found)

    def wait_for_deleted(self, ts: str, *, timeout_s: float) -> Message:
        with self._cond:
            found = self._cond.wait_for(
                lambda: next((m for m in self._deleted if m["ts"] == ts), None), timeout=timeout_s
            )
            if found is None:
                raise TimeoutError(f"message {ts} was not deleted")
            return dict(found)

    def __enter__(self) -> FakeSlackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- called by the handler threads ---------------------------------------------------------
    def _record_call(self, method: str, path: str, authorized: bool) -> None:
        with self._cond:
            self._calls.append((method, path, authorized))

    def _post(self, channel: str, text: str, user: str) -> Message:
        with self._cond:
            self._next_ts += 1
            message = {
                "type": "message",
                "channel": channel,
                "text": text,
                "user": user,
                "ts": f"1700000000.{self._next_ts:06d}",
            }
            self._messages.append(message)
            self._cond.notify_all()
            return dict(message)

    def _delete(self, channel: str, ts: str) -> bool:
        with self._cond:
            for message in self._messages:
                if message["channel"] == channel and message["ts"] == ts:
                    self._messages.remove(message)
                    self._deleted.append(message)
                    self._cond.notify_all()
                    return True
            return False


def _handler(slack: FakeSlackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            url = urlparse(self.path)
            if not self._authorized("GET", url.path):
                return
            if url.path != "/api/conversations.history":
                self._send({"ok": False, "error": "unknown_method"}, status=404)
                return
            channel = parse_qs(url.query).get("channel", [""])[0]
            self._send({"ok": True, "messages": list(reversed(slack.messages(channel)))})

        def do_POST(self) -> None:  # noqa: N802
            path = urlparse(self.path).path
            if not self._authorized("POST", path):
                return
            body = self._body()
            channel = str(body.get("channel", ""))
            if not channel:
                self._send({"ok": False, "error": "channel_not_found"})
            elif path == "/api/chat.postMessage":
                message = slack._post(channel, str(body.get("text", "")), user="U0UNDOABLE")
                self._send(
                    {"ok": True, "channel": channel, "ts": message["ts"], "message": message}
                )
            elif path == "/api/chat.delete":
                ts = str(body.get("ts", ""))
                if slack._delete(channel, ts):
                    self._send({"ok": True, "channel": channel, "ts": ts})
                else:
                    self._send({"ok": False, "error": "message_not_found"})
            else:
                self._send({"ok": False, "error": "unknown_method"}, status=404)

        def _authorized(self, method: str, path: str) -> bool:
            header = self.headers.get("Authorization", "")
            ok = header == f"Bearer {slack.token}"
            slack._record_call(method, path, ok)
            if not ok:
                self._send({"ok": False, "error": "invalid_auth" if header else "not_authed"})
            return ok

        def _body(self) -> dict[str, Any]:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            if self.headers.get("Content-Type", "").startswith("application/json"):
                try:
                    parsed = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    return {}
                return parsed if isinstance(parsed, dict) else {}
            return {k: v[0] for k, v in parse_qs(raw.decode()).items()}

        def _send(self, payload: dict[str, Any], status: int = 200) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler
