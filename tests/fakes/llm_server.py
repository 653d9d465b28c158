"""A real local HTTP server speaking the OpenAI Chat Completions API, with scripted answers.

    with FakeLLMServer() as llm:
        llm.script(tool_call({"forward_code": "print(1)", ...}))
        ... settings LLM_BASE_URL = llm.base_url ...
        llm.requests  # every JSON body it received, to assert what was (not) sent

Each scripted answer is used once, in order; when the script is empty the server answers 500.
The tool name of a scripted tool call is the one the request forced with tool_choice.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    kind: str  # tool | content | error | slow | rejects_tools
    arguments: str = ""
    content: str = ""
    status: int = 200
    delay_s: float = 0.0


def tool_call(arguments: dict[str, Any] | str) -> Answer:
    """A tool call with these arguments (a str is sent as is, e.g. broken JSON)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Answer(kind="tool", arguments=raw)


def content(text: str) -> Answer:
    """A plain assistant message (no tool call)."""
    return Answer(kind="content", content=text)


def error(status: int = 500) -> Answer:
    return Answer(kind="error", status=status)


def slow(delay_s: float, then: Answer) -> Answer:
    """Wait `delay_s` before answering `then` (to trip the client's timeout)."""
    return Answer(
        kind=then.kind,
        arguments=then.arguments,
        content=then.content,
        status=then.status,
        delay_s=delay_s,
    )


def rejects_tools(then: Answer) -> list[Answer]:
    """An endpoint without tool support: 400 to the tool request, then `then` in plain content."""
    return [Answer(kind="error", status=400, content="tools are not supported"), then]


@dataclass
class _State:
    answers: deque[Answer] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)


class FakeLLMServer:
    def __init__(self) -> None:
        self._state = _State()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self._state))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        with self._state.lock:
            return list(self._state.headers)

    def script(self, *answers: Answer | list[Answer]) -> None:
        with self._state.lock:
            for answer in answers:
                self._state.answers.extend(answer if isinstance(answer, list) else [answer])

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._state.stop.set()  # releases slow answers at once
        self._server.shutdown()
        self._server.server_close()


def _completion(model: str, message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server API)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            with state.lock:
                state.requests.append(body)
                state.headers.append(dict(self.headers))
                answer = state.answers.popleft() if state.answers else error(500)
            if self.path.rstrip("/") != "/v1/chat/completions":
                answer = error(404)
            if answer.delay_s and state.stop.wait(answer.delay_s):
                return
            if answer.kind == "error":
                self._send(
                    answer.status,
                    {
                        "error": {
                            "message": answer.content or "scripted error",
                            "type": "server_error",
                        }
                    },
                )
                return
            model = body.get("model", "fake")
            if answer.kind == "tool":
                forced = (body.get("tool_choice") or {}).get("function", {}).get("name", "tool")
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": forced, "arguments": answer.arguments},
                        }
                    ],
                }
                self._send(200, _completion(model, message, "tool_calls"))
                return
            message = {"role": "assistant", "content": answer.content}
            self._send(200, _completion(model, message, "stop"))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

    return Handler
