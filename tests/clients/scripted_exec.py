"""A scripted local server for `undoable exec`'s one-shot transport: each POST answered with the
next (status, headers) of its script, then 200 with RESULT; every request kept in `seen`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

RESULT = {"stdout": "1\n", "stderr": "", "exit_code": 0, "signal": None, "limit": None,
          "truncated": False, "timed_out": False, "oom_killed": False,
          "duration_ms": 5}  # fmt: skip


class Scripted:
    """Answers each request with the next (status, headers) of `answers`, then 200."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, str]]] = []
        self.seen: list[tuple[str, dict[str, str], dict]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                scripted.seen.append((self.path, dict(self.headers), body))
                status, headers = scripted.answers.pop(0) if scripted.answers else (200, {})
                raw = json.dumps(RESULT if status == 200 else {"error": "over quota"}).encode()
                self.send_response(status)
                for name, value in {**headers, "Content-Type": "application/json"}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        return Handler


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    server = Scripted()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()
