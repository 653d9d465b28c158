"""A refused user's next runs, answered before Django (issue 14: a flood that ignores Retry-After).

A token or user refused a run is noted by fairshare.refused_recently until its Retry-After has
passed; within_quota then holds the answer to its next run request and refuses it again. Such a
request still went through Django first: the ASGI handler, the bearer token's lookup on a
thread, the body's parse and validation, all CPU of the web process, for every request of a
flood that ignores Retry-After, on the cores the well-behaved users' runs need.

Here the ASGI app looks at a run request's bearer token before Django does. A token this
process authenticated (webapp.agents.bearers, by digest) that is, or whose user is, refused right
now gets the same 429 after the same hold, from the event loop, and Django never sees it.
Anything else goes to Django as before: an unknown token, another path, a refusal expired.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from webapp.admission.fairshare import refused_recently
from webapp.agents.api_errors import error_answer
from webapp.agents.bearers import bearer_secret, known_bearers

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
