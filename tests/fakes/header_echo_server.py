"""A real local HTTP server that remembers each request it got and answers with what it saw.

    with HeaderEchoServer() as server:
        ... server.base_url, server.authority ("127.0.0.1:PORT"), server.requests

Each request is kept as {"method", "path", "headers": [(name, value), ...], "body"}; the answer
is that record as JSON, so a client through a proxy can print what reached the other end.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class HeaderEchoServer:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def authority(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.authority}"

    def seen(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["path"] == path]

    def _record(self, request: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(request)

    def __enter__(self) -> HeaderEchoServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _handler(server: HeaderEchoServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            record = {
                "method": self.command,
                "path": self.path,
                "headers": list(self.headers.items()),
                "body": self.rfile.read(size).decode("latin-1"),
            }
            server._record(record)
            raw = json.dumps(record).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PUT = _answer  # noqa: N815

    return Handler
