"""One request and out: the transport of `undoable exec`, on the standard library.

A process that makes one call and exits pays for its imports every time, and httpx's were most
of what `undoable exec` spent before its request. This speaks the same protocol as Client
(undoable_client._protocol: the bodies, the errors, the retry decisions) over http.client, and
verifies TLS with certifi's authorities as httpx does. With a proxy set in the environment the
command uses Client instead (`proxied()`), which honours it. The answer stays JSON: the
command prints it, so the models (dataclasses) are never loaded.
"""

from __future__ import annotations

import json
import os
import time
from urllib.parse import urlsplit

from undoable_client import _protocol as protocol
from undoable_client._protocol import Call, RetryPolicy
from undoable_client.errors import ConnectionFailed

TYPE_CHECKING = False  # typing itself is a cost on every start: imported by type checkers only
if TYPE_CHECKING:
    from typing import Any

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def proxied() -> bool:
    return any(os.environ.get(name) or os.environ.get(name.upper()) for name in PROXY_VARIABLES)


class OneShot:
    def __init__(self, url: str, token: str, *, timeout_s: float = 120.0) -> None:
        self.base = url.rstrip("/") + "/api/v1"
        self.token = token
        self.timeout_s = timeout_s
        self.policy = RetryPolicy()

    def exec_json(self, code: str, **options: Any) -> dict[str, Any]:
        """Client.exec's request; the answer as the server's JSON (ExecResult's fields)."""
        # A stateless exec that was refused or stopped left nothing behind: safe to repeat.
        call = Call.json("POST", "/exec", protocol.exec_body(code, **options), retry_safe=True)
        answer: dict[str, Any] = self.call_json(call)
        return answer

    def call_json(self, call: Call) -> Any:
        waited_s = 0.0
        for attempt in range(max(self.policy.retries, 0) + 1):
            status, reason, retry_after, body = self._send(call)
            if 200 <= status < 300:
                return json.loads(body) if body else None
            exc = protocol.api_error(status, body, retry_after, reason)
            delay = self.policy.delay(call, exc, attempt, waited_s)
            if delay is None:
                raise exc
            time.sleep(delay)
            waited_s += delay
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _send(self, call: Call) -> tuple[int, str, str | None, bytes]:
        import http.client

        url = urlsplit(self.base)
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json",
                   **call.headers}  # fmt: skip
        if call.body is not None:
            headers["Content-Type"] = call.content_type
        connection: http.client.HTTPConnection
        if url.scheme == "https":
            connection = http.client.HTTPSConnection(
                url.hostname or "", url.port, timeout=self.timeout_s, context=_tls()
            )
        else:
            connection = http.client.HTTPConnection(
                url.hostname or "", url.port, timeout=self.timeout_s
            )
        try:
            connection.request(call.method, url.path + call.path, body=call.body, headers=headers)
            answer = connection.getresponse()
            return answer.status, answer.reason, answer.getheader("Retry-After"), answer.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ConnectionFailed(0, f"cannot reach {self.base}: {exc}") from exc
        finally:
            connection.close()


def _tls() -> Any:
    import ssl

    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())
