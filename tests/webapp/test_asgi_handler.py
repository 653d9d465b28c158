"""Requests through the deployed ASGI application are freed by their reference counts, and a
client's disconnect still cancels the view (webapp/server/asgi_handler.py)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import Any, Protocol

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest

from webapp.asgi import application
from webapp.server import direct_view
from webapp.server.asgi_handler import AcyclicASGIHandler

pytestmark = pytest.mark.django_db(transaction=True)


def http_scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def served_as_uvicorn_serves(scope: dict[str, Any], body: bytes) -> int:
    """One request through `application`, answered as uvicorn answers: the body in one message,
    and `http.disconnect` from the moment the response's last part is sent (uvicorn's
    `RequestResponseCycle.receive`). The response's status."""
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    messages.put_nowait({"type": "http.request", "body": body, "more_body": False})
    status = 0

    async def send(message: Mapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif not message.get("more_body", False):
            messages.put_nowait({"type": "http.disconnect"})

    await application(scope, messages.get, send)
    return status


@contextlib.contextmanager
def cyclic_garbage() -> Iterator[list[Any]]:
    """What only the cycle collector would have freed in the block, kept for the caller to see."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[Any] = []
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


# Served by Django's handler (ApiASGIHandler), and by the exec view without it (DirectView).
SESSIONS, EXEC = "/api/v1/sessions", "/api/v1/exec"


def serving_frame(thing: object) -> bool:
    """A frame of a handler's request: Django's `handle`, or any of webapp.server.direct_view."""
    if not isinstance(thing, FrameType):
        return False
    code = thing.f_code
    return code is ASGIHandler.handle.__code__ or code.co_filename == direct_view.__file__


async def requests_left_in_cycles(path: str) -> list[FrameType]:
    """Five API requests to `path` through the application; the frames of the handler left in
    cycles (each holds its request, body and response). Not the requests themselves: the test
    run's log capture keeps those, through the records of their 401s."""
    scope = http_scope(
        "POST",
        path,
        [(b"authorization", b"Bearer no"), (b"content-type", b"application/json")],
    )
    assert await served_as_uvicorn_serves(scope, b'{"code": "1"}') == 401  # imports, caches
    with cyclic_garbage() as garbage:
        for _ in range(5):
            assert await served_as_uvicorn_serves(scope, b'{"code": "1"}') == 401
    return [thing for thing in garbage if serving_frame(thing)]


@pytest.mark.parametrize("path", [SESSIONS, EXEC])
async def test_an_answered_api_request_is_freed_without_the_cycle_collector(path: str) -> None:
    assert await requests_left_in_cycles(path) == []


async def test_sabotage_with_djangos_own_disconnect_watcher_requests_stay_in_cycles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        AcyclicASGIHandler, "listen_for_disconnect", ASGIHandler.listen_for_disconnect
    )
    assert len(await requests_left_in_cycles(SESSIONS)) == 5


class EndlessView(AcyclicASGIHandler):
    """A handler whose every view waits until it is cancelled, and says so."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()
        self.cancelled = False

    async def run_get_response(self, request: HttpRequest) -> Any:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


class Endless(Protocol):
    started: asyncio.Event
    cancelled: bool


async def cancelled_by_a_disconnect(app: Any, view: Endless) -> tuple[bool, int]:
    """A request to `app`, whose `view` waits until cancelled, and its client disconnecting once
    the view started: whether that cancelled the view, and how many messages were sent."""
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    messages.put_nowait({"type": "http.request", "body": b"", "more_body": False})
    sent: list[Mapping[str, Any]] = []

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)

    handling = asyncio.create_task(app(http_scope("POST", "/", []), messages.get, send))
    await asyncio.wait_for(view.started.wait(), 10)
    messages.put_nowait({"type": "http.disconnect"})
    await asyncio.wait([handling], timeout=2)
    cancelled_by_the_disconnect = view.cancelled
    handling.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await handling
    return cancelled_by_the_disconnect, len(sent)


async def view_cancelled_by_a_disconnect() -> bool:
    handler = EndlessView()
    cancelled, sent = await cancelled_by_a_disconnect(handler, handler)
    assert sent == 0, "a request with no response sent something"
    return cancelled


async def test_a_client_that_disconnects_mid_request_still_cancels_the_view() -> None:
    assert await view_cancelled_by_a_disconnect()


async def test_sabotage_a_watcher_deaf_to_the_disconnect_leaves_the_view_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def deaf(self: AcyclicASGIHandler, receive: Any) -> None:
        await receive()
        await asyncio.Event().wait()

    monkeypatch.setattr(AcyclicASGIHandler, "listen_for_disconnect", deaf)
    assert not await view_cancelled_by_a_disconnect()
