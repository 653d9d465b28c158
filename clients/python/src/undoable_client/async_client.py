"""The asyncio flavour: the calls of Client, Session, Action and Workspace, awaitable, on
httpx.AsyncClient (no threads). Requests, retries and the stream share `_protocol` with the
synchronous client.

    async with AsyncClient("http://127.0.0.1:8000", "udb_...") as client:
        result = await client.exec("print(1+1)")
        async with await client.session() as s:
            await s.exec("x = 21")
            (await s.exec("x * 2")).stdout      # "42\\n"
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import httpx

from undoable_client import _protocol as protocol
from undoable_client._protocol import MOVING, Call, Listeners, RetryPolicy
from undoable_client.actions import ActionFields
from undoable_client.errors import ConnectionFailed, NotFound
from undoable_client.models import ExecResult

if TYPE_CHECKING:
    from undoable_client._protocol import OutputCallback, TextCallback

_sleep = asyncio.sleep


class AsyncClient:
    """`AsyncClient(url, token)`, with the keyword arguments of Client."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 120.0, retries: int = 4,
                 max_retry_wait_s: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:  # fmt: skip
        self.base = url.rstrip("/") + "/api/v1"
        self.timeout_s = timeout_s
        self.policy = RetryPolicy(retries, max_retry_wait_s)
        self.http = httpx.AsyncClient(
            base_url=self.base,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout_s,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @asynccontextmanager
    async def send(self, call: Call) -> AsyncIterator[httpx.Response]:
        waited_s = 0.0
        for attempt in range(max(self.policy.retries, 0) + 1):
            async with self._open(call) as response:
                if response.is_success:
                    yield response
                    return
                await response.aread()
                exc = protocol.api_error(response.status_code, response.content,
                                         response.headers.get("Retry-After"),
                                         response.reason_phrase)  # fmt: skip
            delay = self.policy.delay(call, exc, attempt, waited_s)
            if delay is None:
                raise exc
            await _sleep(delay)
            waited_s += delay
        raise AssertionError("unreachable: the last attempt returns or raises")

    @asynccontextmanager
    async def _open(self, call: Call) -> AsyncIterator[httpx.Response]:
        headers = dict(call.headers)
        if call.body is not None:
            headers["Content-Type"] = call.content_type
        timeout = httpx.Timeout(self.timeout_s, read=None) if call.stream else None
        request = self.http.build_request(call.method, call.path, content=call.body,
                                          headers=headers, timeout=timeout)  # fmt: skip
        try:
            response = await self.http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise ConnectionFailed(0, f"cannot reach {self.base}: {exc}") from exc
        try:
            yield response
        finally:
            await response.aclose()

    async def call(self, call: Call) -> bytes:
        async with self.send(call) as response:
            return await response.aread()

    async def call_json(self, call: Call) -> Any:
        data = await self.call(call)
        return json.loads(data) if data else None

    async def call_action(self, call: Call, listeners: Listeners) -> dict[str, Any]:
        if not listeners.wanted:
            answer: dict[str, Any] = await self.call_json(call)
            return answer
        async with self.send(call) as response:
            async for line in response.aiter_lines():
                listeners.line(line)
        return listeners.result()

    async def request(self, method: str, path: str, *, body: bytes | None = None,
                      content_type: str = "application/json") -> bytes:  # fmt: skip
        return await self.call(Call(method, path, body, content_type))

    async def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return await self.call_json(Call.json(method, path, body))

    async def exec(self, code: str, **options: Any) -> ExecResult:
        """Run `code` once in a fresh sandbox; the keyword arguments of Client.exec."""
        call = Call.json("POST", "/exec", protocol.exec_body(code, **options), retry_safe=True)
        return ExecResult.from_json(await self.call_json(call))

    async def session(self) -> AsyncSession:
        """Start a stateful session; `async with await client.session() as s:` deletes it."""
        data = await self._json("POST", "/sessions", {})
        return AsyncSession(self, data["id"], data["expires_at"])

    async def action(self, kind: str, forward_code: str, *,
                     on_output: OutputCallback | None = None,
                     on_stdout: TextCallback | None = None,
                     on_stderr: TextCallback | None = None,
                     **options: Any) -> AsyncAction:  # fmt: skip
        """Run an action; the keyword arguments of Client.action."""
        listeners = Listeners(on_output, on_stdout, on_stderr)
        call = protocol.action_call(kind, forward_code, stream=listeners.wanted, **options)
        return AsyncAction(self, await self.call_action(call, listeners))

    async def get_action(self, action_id: int) -> AsyncAction:
        return AsyncAction(self, await self._json("GET", f"/actions/{int(action_id)}"))

    async def actions(self, *, status: str | None = None,
                      kind: str | None = None) -> list[AsyncAction]:  # fmt: skip
        query = urlencode({k: v for k, v in (("status", status), ("kind", kind)) if v})
        found = (await self._json("GET", "/actions" + (f"?{query}" if query else "")))["actions"]
        return [AsyncAction(self, data) for data in found]

    async def workspace(self, workspace_id: int | None = None) -> AsyncWorkspace:
        if workspace_id is None:
            workspace_id = (await self._json("POST", "/workspaces"))["id"]
        return AsyncWorkspace(self, int(workspace_id))


class AsyncAction(ActionFields):
    """An action whose keep, discard, undo, refresh and wait are awaitable."""

    def __init__(self, client: AsyncClient, data: dict[str, Any]) -> None:
        self.client = client
        self.data = data

    async def _verb(self, verb: str, body: dict[str, Any], listeners: Listeners) -> AsyncAction:
        call = protocol.verb_call(self.id, verb, body, listeners.wanted)
        self.data = await self.client.call_action(call, listeners)
        return self

    async def keep(self) -> AsyncAction:
        return await self._verb("keep", {}, Listeners())

    async def discard(self) -> AsyncAction:
        return await self._verb("discard", {}, Listeners())

    async def undo(self, credentials: dict[str, str] | None = None,
                   on_output: OutputCallback | None = None,
                   on_stdout: TextCallback | None = None,
                   on_stderr: TextCallback | None = None) -> AsyncAction:  # fmt: skip
        listeners = Listeners(on_output, on_stdout, on_stderr)
        return await self._verb("undo", {"credentials": credentials or {}}, listeners)

    async def refresh(self) -> AsyncAction:
        self.data = await self.client._json("GET", f"/actions/{self.id}")
        return self

    async def wait(self, timeout_s: float = 300.0, poll_s: float = 0.5) -> AsyncAction:
        deadline = time.monotonic() + timeout_s
        while (await self.refresh()).status in MOVING:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"action {self.id} is still {self.status}")
            await _sleep(poll_s)
        return self


class AsyncSession:
    """A live sandbox whose Python state and files persist between calls."""

    def __init__(self, client: AsyncClient, session_id: str, expires_at: str) -> None:
        self.client = client
        self.id = session_id
        self.expires_at = expires_at
        self._path = f"/sessions/{quote(session_id, safe='')}"

    async def exec(self, code: str, *, language: str = "python",
                   timeout_s: float | None = None) -> ExecResult:  # fmt: skip
        body = protocol.session_exec_body(code, language, timeout_s)
        return ExecResult.from_json(await self.client._json("POST", self._path + "/exec", body))

    async def bash(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        return await self.exec(command, language="bash", timeout_s=timeout_s)

    async def write_file(self, path: str, data: bytes | str) -> None:
        blob = data.encode("utf-8") if isinstance(data, str) else data
        await self.client.request("PUT", protocol.file_path(self._path, path), body=blob,
                                  content_type="application/octet-stream")  # fmt: skip

    async def read_file(self, path: str) -> bytes:
        return await self.client.request("GET", protocol.file_path(self._path, path))

    async def list_files(self, path: str = "") -> list[dict[str, Any]]:
        query = f"?{urlencode({'path': path})}" if path else ""
        found: list[dict[str, Any]] = (
            await self.client._json("GET", f"{self._path}/files{query}")
        )["entries"]
        return found

    async def delete_file(self, path: str) -> None:
        await self.client.request("DELETE", protocol.file_path(self._path, path))

    async def close(self) -> None:
        """Delete the session (its sandbox is killed, its files are gone)."""
        with contextlib.suppress(NotFound):  # already reaped: nothing left to delete
            await self.client.request("DELETE", self._path)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:  # fmt: skip
        await self.close()


class AsyncWorkspace:
    """A workspace, awaitable (`await client.workspace()`)."""

    def __init__(self, client: AsyncClient, workspace_id: int) -> None:
        self.client = client
        self.id = workspace_id
        self._path = f"/workspaces/{workspace_id}"

    async def write_file(self, path: str, data: bytes | str) -> None:
        blob = data.encode("utf-8") if isinstance(data, str) else data
        await self.client.request("PUT", protocol.file_path(self._path, path), body=blob,
                                  content_type="application/octet-stream")  # fmt: skip

    async def read_file(self, path: str) -> bytes:
        return await self.client.request("GET", protocol.file_path(self._path, path))

    async def delete_file(self, path: str) -> None:
        await self.client.request("DELETE", protocol.file_path(self._path, path))

    async def list_files(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await self.client._json("GET", f"{self._path}/files"))[
            "entries"
        ]
        return found
