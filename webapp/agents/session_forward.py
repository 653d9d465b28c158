"""Passing a session request to the web process that holds the session.

A session's sandbox lives in one web process. A request for it that lands on another process
(no sticky routing in front) is sent on to the holder, at the URL the holder keeps in the
live-process registry (UNDOABLE_PEER_URL, webapp.reliability.workers.process_address). The
holder authenticates the request again and checks ownership as for any request: forwarding
grants nothing. A forwarded request is marked and never forwarded a second time, so two
processes that disagree about who holds a session cannot bounce a request between them.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from django.http import HttpRequest, HttpResponse

from webapp.agents.schemas import ApiError
from webapp.agents.session_services import HeldByPeer, worker_name
from webapp.executor_glue import server_caps

logger = logging.getLogger(__name__)

FORWARDED_HEADER = "X-Undoable-Forwarded-By"
# What the holder's answer carries over: the body's type and the API's own headers.
_KEPT_HEADERS = (
    "content-type",
    "retry-after",
    "www-authenticate",
    "x-exit-code",
    "x-timed-out",
    "x-duration-ms",
)
_SENT_HEADERS = ("Authorization", "Content-Type", "Accept")
# Beyond the longest cell: the holder answers within its own wall-time cap.
_ANSWER_MARGIN_S = 30.0


View = Callable[..., Awaitable[HttpResponse]]


def served_by_holder(view: View) -> View:
    """Wrap a session view: when the session is held by a peer, answer with the peer's reply."""

    @functools.wraps(view)
    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return await view(request, *args, **kwargs)
        except HeldByPeer as peer:
            if request.headers.get(FORWARDED_HEADER):
                raise ApiError(
                    503, "the session's holder did not take it", retry_after_s=1
                ) from None
            return await forward(request, peer)

    # ninja reads the parameters' types from the signature, resolved here in the view's module
    # (its string annotations mean nothing in this one).
    wrapper.__signature__ = inspect.signature(view, eval_str=True)  # type: ignore[attr-defined]
    return wrapper


async def forward(request: HttpRequest, peer: HeldByPeer) -> HttpResponse:
    """Send `request` on to the holder and return its answer as ours."""
    headers = {name: request.headers[name] for name in _SENT_HEADERS if name in request.headers}
    headers[FORWARDED_HEADER] = worker_name()
    # The name the client used (already checked against ALLOWED_HOSTS here), not the peer's
    # address, which the holder's ALLOWED_HOSTS need not list.
    headers["Host"] = request.get_host()
    url = peer.address.rstrip("/") + request.get_full_path()
    timeout = httpx.Timeout(server_caps().wall_time_s + _ANSWER_MARGIN_S, connect=2.0)
    body = request.read()  # not request.body: a session file may exceed the form-data limit
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            answer = await client.request(
                request.method or "GET", url, content=body, headers=headers
            )
    except httpx.HTTPError as exc:
        logger.warning(
            "session peer unreachable", extra={"worker": peer.worker, "error": repr(exc)}
        )
        raise ApiError(
            503, "the web process holding the session did not answer", retry_after_s=1
        ) from None
    logger.info(
        "session request forwarded", extra={"worker": peer.worker, "status": answer.status_code}
    )
    response = HttpResponse(answer.content, status=answer.status_code)
    for name in _KEPT_HEADERS:
        if name in answer.headers:
            response[name] = answer.headers[name]
    return response
