"""What the sync and async clients share: request bodies, answers to errors, retry decisions and
the NDJSON stream. No I/O here, so both flavours speak the protocol one way."""

from __future__ import annotations

import json
from urllib.parse import quote

from undoable_client.errors import ApiError, error_for

# Neither typing nor dataclasses here: `undoable exec` (cli/oneshot.py) imports this module,
# and the two (dataclasses with inspect) would be a third of that command's start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeAlias

    OutputCallback: TypeAlias = Callable[[dict[str, Any]], None]
    TextCallback: TypeAlias = Callable[[str], None]

NDJSON = "application/x-ndjson"
# 429 (over the token's quota) and 503 (no capacity) mean nothing ran: asking again is safe.
RETRY_STATUSES = frozenset({429, 503})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE"})
# States after which nothing happens without a request (keep, discard, undo).
MOVING = frozenset({"queued", "running"})


class Call:
    """One request. `retry_safe`: asking again cannot do a thing twice (an idempotent method,
    a stateless exec, or a create that carries an Idempotency-Key). `stream`: a long answer
    (an action's), read with no read timeout."""

    __slots__ = ("method", "path", "body", "content_type", "headers", "retry_safe", "stream")

    def __init__(self, method: str, path: str, body: bytes | None = None,
                 content_type: str = "application/json", headers: dict[str, str] | None = None,
                 retry_safe: bool = False, stream: bool = False) -> None:  # fmt: skip
        self.method = method
        self.path = path
        self.body = body
        self.content_type = content_type
        self.headers = headers if headers is not None else {}
        self.retry_safe = retry_safe
        self.stream = stream

    def __repr__(self) -> str:
        return f"Call({self.method} {self.path})"

    @classmethod
    def json(cls, method: str, path: str, body: Any = None, **options: Any) -> Call:
        raw = None if body is None else json.dumps(body).encode()
        return cls(method, path, raw, **options)

    def may_retry(self, status: int) -> bool:
        # A 429 is refused before anything runs on every endpoint; a 503 may come from a server
        # that stopped with a session cell part way, so only calls safe to repeat retry it.
        if status == 429:
            return True
        return status in RETRY_STATUSES and (self.retry_safe or self.method in IDEMPOTENT_METHODS)


class RetryPolicy:
    """`retries` attempts after the first, each after the server's Retry-After (else 0.5 s,
    doubling), while the waits add up to at most `max_wait_s`."""

    def __init__(self, retries: int = 4, max_wait_s: float = 30.0) -> None:
        self.retries = retries
        self.max_wait_s = max_wait_s

    def delay(self, call: Call, exc: ApiError, attempt: int, waited_s: float) -> float | None:
        """How long to wait before asking again, or None to give up and raise."""
        if not call.may_retry(exc.status) or attempt >= self.retries:
            return None
        delay = exc.retry_after_s if exc.retry_after_s is not None else 0.5 * 2**attempt
        return delay if waited_s + delay <= self.max_wait_s else None


def api_error(status: int, raw: bytes, retry_after: str | None, reason: str = "") -> ApiError:
    try:
        message = json.loads(raw)["error"]
    except (ValueError, KeyError, TypeError):
        message = raw.decode("utf-8", "replace")[:500] or reason or "error"
    return error_for(status, str(message), retry_after_s(retry_after))


def retry_after_s(value: str | None) -> float | None:
    """Retry-After in seconds: delay-seconds or an HTTP date (RFC 9110); None if absent or bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    # Loaded here: a one-shot command (`undoable exec`) rarely needs them.
    import email.utils
    from datetime import UTC, datetime

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def exec_body(code: str, *, files: dict[str, str] | None = None, interpreter_mode: bool = False,
              stdin: str | None = None, timeout_s: float | None = None,
              language: str = "python") -> dict[str, Any]:  # fmt: skip
    body: dict[str, Any] = {"code": code, "language": language}
    if files:
        body["files"] = files
    if interpreter_mode:
        body["interpreter_mode"] = True
    if stdin is not None:
        body["stdin"] = stdin
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    return body


def session_exec_body(code: str, language: str, timeout_s: float | None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "language": language}
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    return body


def action_call(kind: str, forward_code: str, *, reverse_code: str = "",
                hosts: list[str] | None = None, intent: str = "",
                credentials: dict[str, str] | None = None, workspace: int | None = None,
                db: dict[str, str] | None = None, timeout_s: float | None = None,
                idempotency_key: str | None = None, stream: bool = False,
                rehearse: bool | str = False, probe: str = "") -> Call:  # fmt: skip
    """The create request; it always carries an Idempotency-Key, so retrying it is safe.
    `rehearse`: True (run for real only if the rehearsal passes) or "only". `probe` (rest):
    a program that exits 0 once the effect is gone, run after Undo's reverse program."""
    body: dict[str, Any] = {"kind": kind, "forward_code": forward_code}
    optional = {
        "reverse_code": reverse_code,
        "hosts": hosts,
        "intent": intent,
        "credentials": credentials,
        "workspace": workspace,
        "db": db,
        "timeout_s": timeout_s,
        "rehearse": rehearse,
        "probe": probe,
    }
    body.update({name: value for name, value in optional.items() if value})
    import uuid

    headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
    if stream:
        headers["Accept"] = NDJSON
    return Call.json("POST", "/actions", body, headers=headers, retry_safe=True, stream=True)


def verb_call(action_id: int, verb: str, body: dict[str, Any], stream: bool) -> Call:
    headers = {"Accept": NDJSON} if stream else {}
    return Call.json("POST", f"/actions/{int(action_id)}/{verb}", body, headers=headers,
                     stream=True)  # fmt: skip


def file_path(prefix: str, path: str) -> str:
    return f"{prefix}/files/{quote(path.lstrip('/'), safe='/')}"


class Listeners:
    """Where streamed output goes: `on_output(chunk)` with each {"seq", "stream", "text"},
    `on_stdout(text)` / `on_stderr(text)` with the text of each stream."""

    def __init__(self, on_output: OutputCallback | None = None,
                 on_stdout: TextCallback | None = None,
                 on_stderr: TextCallback | None = None) -> None:  # fmt: skip
        self.on_output = on_output
        self.by_stream = {"stdout": on_stdout, "stderr": on_stderr}
        self.action: dict[str, Any] | None = None

    @property
    def wanted(self) -> bool:
        return self.on_output is not None or any(self.by_stream.values())

    def line(self, raw: str | bytes) -> None:
        """One NDJSON line of the answer."""
        if not raw.strip():
            return
        event = json.loads(raw)
        if event.get("type") == "output":
            if self.on_output is not None:
                self.on_output(event)
            callback = self.by_stream.get(event.get("stream", ""))
            if callback is not None:
                callback(str(event.get("text", "")))
        elif event.get("type") == "action":
            self.action = event["action"]

    def result(self) -> dict[str, Any]:
        if self.action is None:
            raise ConnectionError("the server ended the stream before the action's last line")
        return self.action
