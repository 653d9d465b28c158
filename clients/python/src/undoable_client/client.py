"""The synchronous client for /api/v1/exec and /api/v1/sessions, on urllib."""

from __future__ import annotations

import email.utils
import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from undoable_client.models import ApiError, ExecResult

if TYPE_CHECKING:
    from undoable_client.actions import Action, Workspace

# 429 (over the token's quota) and 503 (no capacity) mean nothing ran: asking again is safe.
RETRY_STATUSES = frozenset({429, 503})
_sleep = time.sleep  # tests record the waits instead


class Client:
    """`Client(url, token)`: url is the server's base address, e.g. http://127.0.0.1:8000.

    A 429 or 503 answer is retried up to `retries` times, each after the server's Retry-After
    (else 0.5 s, doubling), as long as the waits add up to at most `max_retry_wait_s`; then the
    ApiError is raised. `retries=0` turns retrying off.
    """

    def __init__(self, url: str, token: str, *, timeout_s: float = 120.0, retries: int = 4,
                 max_retry_wait_s: float = 30.0) -> None:  # fmt: skip
        self.base = url.rstrip("/") + "/api/v1"
        self.token = token
        self.timeout_s = timeout_s
        self.retries = retries
        self.max_retry_wait_s = max_retry_wait_s

    def exec(self, code: str, *, files: dict[str, str] | None = None,
             interpreter_mode: bool = False, stdin: str | None = None,
             timeout_s: float | None = None, language: str = "python") -> ExecResult:  # fmt: skip
        """Run `code` once in a fresh sandbox and return its result."""
        body: dict[str, Any] = {"code": code, "language": language}
        if files:
            body["files"] = files
        if interpreter_mode:
            body["interpreter_mode"] = True
        if stdin is not None:
            body["stdin"] = stdin
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        return ExecResult.from_json(self._json("POST", "/exec", body))

    def session(self) -> Session:
        """Start a stateful session; use it as a context manager so it is always deleted."""
        data = self._json("POST", "/sessions", {})
        return Session(self, data["id"], data["expires_at"])

    def request(self, method: str, path: str, *, body: bytes | None = None,
                content_type: str = "application/json",
                headers: dict[str, str] | None = None) -> bytes:  # fmt: skip
        with self.open(method, path, body=body, content_type=content_type,
                       headers=headers) as response:  # fmt: skip
            data: bytes = response.read()
            return data

    def open(self, method: str, path: str, *, body: bytes | None = None,
             content_type: str = "application/json",
             headers: dict[str, str] | None = None) -> Any:  # fmt: skip
        """The open HTTP response (read it as it comes), retried as `request` is."""
        waited_s = 0.0
        for attempt in range(max(self.retries, 0) + 1):
            try:
                return self._open(method, path, body, content_type, headers or {})
            except ApiError as exc:
                delay = self._retry_delay(exc, attempt, waited_s)
                if delay is None:
                    raise
                _sleep(delay)
                waited_s += delay
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _retry_delay(self, exc: ApiError, attempt: int, waited_s: float) -> float | None:
        """How long to wait before asking again, or None to give up and raise."""
        if exc.status not in RETRY_STATUSES or attempt >= self.retries:
            return None
        delay = exc.retry_after_s if exc.retry_after_s is not None else 0.5 * 2**attempt
        return delay if waited_s + delay <= self.max_retry_wait_s else None

    def _open(self, method: str, path: str, body: bytes | None, content_type: str,
              headers: dict[str, str]) -> Any:  # fmt: skip
        req = urllib.request.Request(self.base + path, data=body, method=method)  # noqa: S310
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if body is not None:
            req.add_header("Content-Type", content_type)
        for name, value in headers.items():
            req.add_header(name, value)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout_s)  # noqa: S310
        except urllib.error.HTTPError as exc:
            raise _api_error(exc) from None

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None,
              headers: dict[str, str] | None = None) -> Any:  # fmt: skip
        raw = None if body is None else json.dumps(body).encode()
        data = self.request(method, path, body=raw, headers=headers)
        return json.loads(data) if data else None

    def action(self, kind: str, forward_code: str, **options: Any) -> Action:
        """Run an action (see `undoable_client.actions.action_create` for the options)."""
        from undoable_client.actions import action_create

        return action_create(self, kind, forward_code, **options)

    def get_action(self, action_id: int) -> Action:
        from undoable_client.actions import Action

        return Action(self, self._json("GET", f"/actions/{int(action_id)}"))

    def actions(self, *, status: str | None = None, kind: str | None = None) -> list[Action]:
        from undoable_client.actions import Action

        query = urlencode({k: v for k, v in (("status", status), ("kind", kind)) if v})
        found = self._json("GET", "/actions" + (f"?{query}" if query else ""))["actions"]
        return [Action(self, data) for data in found]

    def workspace(self, workspace_id: int | None = None) -> Workspace:
        """A new workspace, or the one with this id."""
        from undoable_client.actions import Workspace

        if workspace_id is None:
            workspace_id = self._json("POST", "/workspaces")["id"]
        return Workspace(self, int(workspace_id))


class Session:
    """A live sandbox whose Python state and files persist between calls."""

    def __init__(self, client: Client, session_id: str, expires_at: str) -> None:
        self.client = client
        self.id = session_id
        self.expires_at = expires_at
        self._path = f"/sessions/{quote(session_id, safe='')}"

    def exec(self, code: str, *, language: str = "python",
             timeout_s: float | None = None) -> ExecResult:  # fmt: skip
        body: dict[str, Any] = {"code": code, "language": language}
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        return ExecResult.from_json(self.client._json("POST", self._path + "/exec", body))

    def bash(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        return self.exec(command, language="bash", timeout_s=timeout_s)

    def write_file(self, path: str, data: bytes | str) -> None:
        blob = data.encode("utf-8") if isinstance(data, str) else data
        self.client.request("PUT", self._file(path), body=blob,
                            content_type="application/octet-stream")  # fmt: skip

    def read_file(self, path: str) -> bytes:
        return self.client.request("GET", self._file(path))

    def list_files(self, path: str = "") -> list[dict[str, Any]]:
        query = f"?{urlencode({'path': path})}" if path else ""
        entries: list[dict[str, Any]] = self.client._json("GET", f"{self._path}/files{query}")[
            "entries"
        ]
        return entries

    def delete_file(self, path: str) -> None:
        self.client.request("DELETE", self._file(path))

    def close(self) -> None:
        """Delete the session (its sandbox is killed, its files are gone)."""
        try:
            self.client.request("DELETE", self._path)
        except ApiError as exc:
            if exc.status != 404:  # already reaped: nothing left to delete
                raise

    def _file(self, path: str) -> str:
        return f"{self._path}/files/{quote(path.lstrip('/'), safe='/')}"

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.close()


def _api_error(exc: urllib.error.HTTPError) -> ApiError:
    raw = exc.read()
    try:
        message = json.loads(raw)["error"]
    except (ValueError, KeyError, TypeError):
        message = raw.decode("utf-8", "replace")[:500] or exc.reason
    return ApiError(exc.code, str(message), _retry_after_s(exc.headers.get("Retry-After")))


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After in seconds: delay-seconds or an HTTP date (RFC 9110); None if absent or bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
