"""The synchronous client for /api/v1: exec, sessions, actions and workspaces, on httpx."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import httpx

from undoable_client import _protocol as protocol
from undoable_client._protocol import Call, Listeners, RetryPolicy
from undoable_client.actions import Action, Workspace
from undoable_client.errors import ApiError, ConnectionFailed, NotFound, Unavailable
from undoable_client.models import ExecResult

if TYPE_CHECKING:
    from undoable_client._protocol import OutputCallback, TextCallback

_sleep = time.sleep  # tests record the waits instead


class Client:
    """`Client(url, token)`: url is the server's base address, e.g. http://127.0.0.1:8000.

    A 429 answer, and a 503 to a call safe to repeat, is retried up to `retries` times, each
    after the server's Retry-After (else 0.5 s, doubling), while the waits add up to at most
    `max_retry_wait_s`; then the error is raised. `retries=0` turns retrying off.
    """

    def __init__(self, url: str, token: str, *, timeout_s: float = 120.0, retries: int = 4,
                 max_retry_wait_s: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:  # fmt: skip
        self.base = url.rstrip("/") + "/api/v1"
        self.token = token
        self.timeout_s = timeout_s
        self.policy = RetryPolicy(retries, max_retry_wait_s)
        self.http = httpx.Client(
            base_url=self.base,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout_s,
            transport=transport,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------

    @contextmanager
    def send(self, call: Call) -> Iterator[httpx.Response]:
        """The answer to `call`, open for reading as it comes; errors raised, retries done."""
        waited_s = 0.0
        for attempt in range(max(self.policy.retries, 0) + 1):
            with self._open(call) as response:
                if response.is_success:
                    yield response
                    return
                response.read()
                exc = protocol.api_error(response.status_code, response.content,
                                         response.headers.get("Retry-After"),
                                         response.reason_phrase)  # fmt: skip
            delay = self.policy.delay(call, exc, attempt, waited_s)
            if delay is None:
                raise exc
            _sleep(delay)
            waited_s += delay
        raise AssertionError("unreachable: the last attempt returns or raises")

    @contextmanager
    def _open(self, call: Call) -> Iterator[httpx.Response]:
        headers = dict(call.headers)
        if call.body is not None:
            headers["Content-Type"] = call.content_type
        timeout = httpx.Timeout(self.timeout_s, read=None) if call.stream else None
        request = self.http.build_request(call.method, call.path, content=call.body,
                                          headers=headers, timeout=timeout)  # fmt: skip
        try:
            response = self.http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise ConnectionFailed(0, f"cannot reach {self.base}: {exc}") from exc
        try:
            yield response
        finally:
            response.close()

    def call(self, call: Call) -> bytes:
        with self.send(call) as response:
            return response.read()

    def call_json(self, call: Call) -> Any:
        data = self.call(call)
        return json.loads(data) if data else None

    def call_action(self, call: Call, listeners: Listeners) -> dict[str, Any]:
        """An action's create or verb: the JSON answer, or the NDJSON stream into `listeners`."""
        if not listeners.wanted:
            answer: dict[str, Any] = self.call_json(call)
            return answer
        with self.send(call) as response:
            for line in response.iter_lines():
                listeners.line(line)
        return listeners.result()

    def request(self, method: str, path: str, *, body: bytes | None = None,
                content_type: str = "application/json",
                headers: dict[str, str] | None = None) -> bytes:  # fmt: skip
        """A raw request to `path` under /api/v1; the answer's bytes."""
        return self.call(Call(method, path, body, content_type, headers or {}))

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None,
              headers: dict[str, str] | None = None) -> Any:  # fmt: skip
        return self.call_json(Call.json(method, path, body, headers=headers or {}))

    # -- exec and sessions -------------------------------------------------------------------

    def exec(self, code: str, **options: Any) -> ExecResult:
        """Run `code` once in a fresh sandbox and return its result. Options: files,
        interpreter_mode, stdin, timeout_s, language."""
        # A stateless exec that was refused or stopped left nothing behind: safe to repeat.
        call = Call.json("POST", "/exec", protocol.exec_body(code, **options), retry_safe=True)
        return ExecResult.from_json(self.call_json(call))

    def session(self) -> Session:
        """Start a stateful session; use it as a context manager so it is always deleted."""
        data = self.call_json(Call.json("POST", "/sessions", {}))
        return Session(self, data["id"], data["expires_at"])

    def get_session(self, session_id: str) -> Session:
        data = self._json("GET", f"/sessions/{quote(session_id, safe='')}")
        return Session(self, data["id"], data["expires_at"])

    # -- actions and workspaces --------------------------------------------------------------

    def action(self, kind: str, forward_code: str, *, on_output: OutputCallback | None = None,
               on_stdout: TextCallback | None = None, on_stderr: TextCallback | None = None,
               **options: Any) -> Action:  # fmt: skip
        """Create an action and run its forward program; returns it once it has settled.

        Options: reverse_code, hosts, intent, credentials (this call only), workspace, db
        ({"sqlite": PATH} or {"url": CREDENTIAL_NAME}: a credential holding a postgresql://,
        mysql:// or mariadb:// URL), timeout_s, idempotency_key, rehearse (True: run for real
        only if its rehearsal passes; "only": rehearse and stop), probe (rest: a program that
        exits 0 once the effect is gone, run after Undo's reverse program).
        Output streams to `on_output(chunk)`, `on_stdout(text)`, `on_stderr(text)` as it comes.
        """
        listeners = Listeners(on_output, on_stdout, on_stderr)
        call = protocol.action_call(kind, forward_code, stream=listeners.wanted, **options)
        return Action(self, self.call_action(call, listeners))

    def get_action(self, action_id: int) -> Action:
        return Action(self, self._json("GET", f"/actions/{int(action_id)}"))

    def actions(self, *, status: str | None = None, kind: str | None = None,
                token: str | None = None) -> list[Action]:  # fmt: skip
        filters = (("status", status), ("kind", kind), ("token", token))
        query = urlencode({k: v for k, v in filters if v})
        found = self._json("GET", "/actions" + (f"?{query}" if query else ""))["actions"]
        return [Action(self, data) for data in found]

    def workspace(self, workspace_id: int | None = None) -> Workspace:
        """A new workspace, or the one with this id."""
        if workspace_id is None:
            workspace_id = self._json("POST", "/workspaces")["id"]
        return Workspace(self, int(workspace_id))

    def limits_get(self, token_id: int) -> dict[str, Any]:
        """The damage limits of one of the owner's tokens (its id, as its Limits page shows)."""
        answer: dict[str, Any] = self._json("GET", f"/tokens/{int(token_id)}/limits")
        return answer

    def limits_set(self, token_id: int, **limits: Any) -> dict[str, Any]:
        """Set limits of another of the owner's tokens, the others staying as they are:
        e.g. `limits_set(12, allowed_kinds=["python"], pending_at_once=3)`. This client's
        token must have no limits itself (else ActionRefused, as for its own token)."""
        body = {**self.limits_get(token_id), **limits}
        answer: dict[str, Any] = self._json("PUT", f"/tokens/{int(token_id)}/limits", body)
        return answer

    def proposal(self, prompt: str, kind: str, *, hosts: list[str] | None = None,
                 credentials: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
        """The server's LLM proposes forward and reverse code for `prompt` (nothing runs)."""
        body = {"prompt": prompt, "kind": kind, "hosts": hosts or [],
                "credentials": credentials or []}  # fmt: skip
        answer: dict[str, Any] = self._json("POST", "/proposals", body)
        return answer


class Session:
    """A live sandbox whose Python state and files persist between calls."""

    def __init__(self, client: Client, session_id: str, expires_at: str) -> None:
        self.client = client
        self.id = session_id
        self.expires_at = expires_at
        self._path = f"/sessions/{quote(session_id, safe='')}"

    def exec(self, code: str, *, language: str = "python",
             timeout_s: float | None = None) -> ExecResult:  # fmt: skip
        body = protocol.session_exec_body(code, language, timeout_s)
        return ExecResult.from_json(self.client._json("POST", self._path + "/exec", body))

    def bash(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        return self.exec(command, language="bash", timeout_s=timeout_s)

    def write_file(self, path: str, data: bytes | str) -> None:
        blob = data.encode("utf-8") if isinstance(data, str) else data
        self.client.request("PUT", protocol.file_path(self._path, path), body=blob,
                            content_type="application/octet-stream")  # fmt: skip

    def read_file(self, path: str) -> bytes:
        return self.client.request("GET", protocol.file_path(self._path, path))

    def list_files(self, path: str = "") -> list[dict[str, Any]]:
        query = f"?{urlencode({'path': path})}" if path else ""
        found: list[dict[str, Any]] = self.client._json("GET", f"{self._path}/files{query}")[
            "entries"
        ]
        return found

    def delete_file(self, path: str) -> None:
        self.client.request("DELETE", protocol.file_path(self._path, path))

    def close(self) -> None:
        """Delete the session (its sandbox is killed, its files are gone)."""
        with contextlib.suppress(NotFound):  # already reaped: nothing left to delete
            self.client.request("DELETE", self._path)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.close()


__all__ = ["ApiError", "Client", "Session", "Unavailable"]
