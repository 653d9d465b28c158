"""A refused user's next runs, answered before Django (issue 14: a flood that ignores Retry-After).

A token or user refused a run is noted by fairshare.refused_recently until its Retry-After has
passed; within_quota then holds the answer to its next run request and refuses it again. Such a
request still went through Django first: the ASGI handler, the bearer token's lookup on a
thread, the body's parse and validation, all CPU of the web process, for every request of a
flood that ignores Retry-After, on the cores the well-behaved users' runs need.

Here the ASGI app looks at a run request's bearer token before Django does. A token this process
authenticated (noted by webapp.agents.auth, by digest) that is, or whose user is, refused right
now gets the same 429 after the same hold, from the event loop, and Django never sees it.
Anything else goes to Django as before: an unknown token, another path, a refusal expired.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from webapp.agents.fairshare import refused_recently
from webapp.asgi_answers import error_answer

ASGIApp = Callable[[dict[str, Any], Callable[..., Any], Callable[..., Any]], Awaitable[None]]

# The requests within_quota refuses a refused user: a stateless run, a session cell.
_EXEC = "/api/v1/exec"
_SESSIONS = "/api/v1/sessions/"


def is_run_request(scope: dict[str, Any]) -> bool:
    if scope.get("method") != "POST":
        return False
    path: str = scope["path"]
    if path == _EXEC:
        return True
    session_id, _, tail = path.removeprefix(_SESSIONS).partition("/")
    return path.startswith(_SESSIONS) and bool(session_id) and tail == "exec"


def bearer_digest(secret: str) -> bytes:
    """What a token is remembered by here: never the secret itself."""
    return hashlib.blake2b(secret.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def bearer_secret(scope: dict[str, Any]) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, read as ninja's HttpBearer does."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, secret = value.decode("latin-1").partition(" ")
            return secret.strip() if scheme.lower() == "bearer" else None
    return None


class KnownBearers:
    """Token digest -> (the token's id, its owner's), for tokens this process authenticated
    lately (bounded)."""

    MAX_KNOWN = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: OrderedDict[bytes, tuple[Hashable, Hashable]] = OrderedDict()

    def note(self, secret: str, token: Hashable, owner: Hashable) -> None:
        digest = bearer_digest(secret)
        with self._lock:
            self._ids[digest] = (token, owner)
            self._ids.move_to_end(digest)
            if len(self._ids) > self.MAX_KNOWN:
                self._ids.popitem(last=False)

    def ids(self, secret: str) -> tuple[Hashable, Hashable] | None:
        """(token id, owner id) of a known token, else None."""
        with self._lock:
            return self._ids.get(bearer_digest(secret))

    def reset(self) -> None:
        with self._lock:
            self._ids.clear()


known_bearers = KnownBearers()


def refused_early(api: ASGIApp) -> ASGIApp:
    """`api` with a refused user's run requests answered in front of it."""

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]):
        secret = bearer_secret(scope) if is_run_request(scope) else None
        ids = known_bearers.ids(secret) if secret else None
        again = refused_recently.again(*ids) if ids is not None else None
        if again is None:
            await api(scope, receive, send)
            return
        hold_s, refused = again
        await asyncio.sleep(hold_s)  # as within_quota does
        retry_after = [(b"retry-after", str(refused.retry_after_s).encode())]
        await error_answer(send, 429, str(refused), headers=retry_after)

    return app
