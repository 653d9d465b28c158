"""webapp.server.direct_view: what Django's handler did for the exec view, done without it: the
body's cap, a client's disconnect cancelling the view, a 500 for anything unexpected, the API's
middleware around it all."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.test import override_settings

from tests.webapp.test_asgi_handler import cancelled_by_a_disconnect, http_scope
from webapp.admission.backends import get_admission
from webapp.agents import exec_api
from webapp.asgi import application
from webapp.server import direct_view
from webapp.server.api_asgi import ApiSecurityMiddleware
from webapp.server.direct_view import DirectView

pytestmark = pytest.mark.django_db(transaction=True)
CAP = 1000


class Recorder:
    """A view that records the bodies it was given, and can wait until it is cancelled."""

    def __init__(self, *, endless: bool = False) -> None:
        self.bodies: list[bytes] = []
        self.started = asyncio.Event()
        self.cancelled = False
        self.endless = endless

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        self.bodies.append(request.body)
        self.started.set()
        if self.endless:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        return HttpResponse(b"ok", content_type="text/plain")


async def served(
    view: Any, messages: list[dict[str, Any]], *, headers: list[tuple[bytes, bytes]] = ()
) -> tuple[int | None, bytes, dict[bytes, bytes]]:
    """One request through DirectView(view): its messages as the server hands them over, then
    nothing (the client waits). The status (None: nothing sent), body and headers."""
    endpoint = DirectView(view, middleware=ApiSecurityMiddleware, max_body_bytes=lambda: CAP)
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for message in messages:
        queue.put_nowait(message)
    sent: list[Mapping[str, Any]] = []

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)

    await endpoint(http_scope("POST", "/x", list(headers)), queue.get, send)
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    if start is None:
        return None, b"", {}
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], body, dict(start["headers"])


def body_message(body: bytes, *, more: bool = False) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


async def test_a_body_within_the_cap_reaches_the_view_whole_with_the_apis_headers() -> None:
    view = Recorder()
    parts = [body_message(b"a" * 600, more=True), body_message(b"b" * 400)]
    status, body, headers = await served(view, parts)
    assert (status, body, view.bodies) == (200, b"ok", [b"a" * 600 + b"b" * 400])
    assert headers[b"content-length"] == b"2"
    assert headers[b"x-content-type-options"] == b"nosniff"


@pytest.mark.parametrize(
    ("declared", "parts"),
    [
        (b"%d" % (CAP + 1), [body_message(b"x" * 10, more=True)]),  # declared too large
        (None, [body_message(b"x" * 600, more=True), body_message(b"x" * 600)]),  # sent
    ],
)
async def test_a_body_past_the_cap_is_413_and_never_reaches_the_view(declared, parts) -> None:
    view = Recorder()
    headers = [(b"content-length", declared)] if declared else []
    status, body, _ = await served(view, parts, headers=headers)
    assert (status, body, view.bodies) == (413, b'{"error": "request body is too large"}', [])


@pytest.mark.sabotage
async def test_sabotage_with_no_cap_the_view_gets_the_whole_body(monkeypatch) -> None:
    capped = direct_view.read_body
    monkeypatch.setattr(
        direct_view, "read_body", lambda scope, receive, _: capped(scope, receive, 10**12)
    )
    view = Recorder()
    parts = [body_message(b"x" * 600, more=True), body_message(b"x" * 600)]
    assert (await served(view, parts))[0] == 200
    assert view.bodies == [b"x" * 1200]


async def test_an_unexpected_error_is_a_500_in_the_apis_shape(caplog) -> None:
    async def broken(request: HttpRequest) -> HttpResponseBase:
        raise RuntimeError("bug")

    status, body, headers = await served(broken, [body_message(b"")])
    assert (status, body) == (500, b'{"error": "internal error"}')
    assert headers[b"x-frame-options"] == b"DENY"
    assert "agent api error" in caplog.text


async def disconnected_mid_view() -> tuple[bool, int]:
    """The client disconnects while the view runs: whether that cancelled the view, and how
    many messages were sent."""
    view = Recorder(endless=True)
    endpoint = DirectView(view, middleware=ApiSecurityMiddleware, max_body_bytes=lambda: CAP)
    return await cancelled_by_a_disconnect(endpoint, view)


async def test_a_client_that_disconnects_cancels_the_view_and_is_sent_nothing() -> None:
    assert await disconnected_mid_view() == (True, 0)


@pytest.mark.sabotage
async def test_sabotage_a_deaf_watcher_leaves_the_view_running(monkeypatch) -> None:
    async def deaf(receive: Any, answering: Any, gone: Any) -> None:
        await receive()

    monkeypatch.setattr(direct_view, "disconnect_watch", deaf)
    assert await disconnected_mid_view() == (False, 0)


def exec_gone_while_waiting(owner: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An exec through the application waits for the host's one slot, held here, and its client
    disconnects; the slot is then freed. What of the exec's run started."""
    started: list[str] = []
    monkeypatch.setattr(exec_api, "exec_run", lambda spec, timeout_s: started.append("run"))
    headers = [
        (b"authorization", f"Bearer {owner.token}".encode()),
        (b"content-type", b"application/json"),
    ]

    async def scenario() -> None:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        queue.put_nowait(body_message(b'{"code": "print(1)"}'))

        async def send(message: Mapping[str, Any]) -> None:
            raise AssertionError(f"an answer to a client that left: {message}")

        with get_admission().admit(owner.user.pk, capacity=1, wait_s=0, queue=0):
            serving = asyncio.ensure_future(
                application(http_scope("POST", "/api/v1/exec", headers), queue.get, send)
            )
            for _ in range(1000):
                if get_admission().waiting(owner.user.pk) == 1:
                    break
                await asyncio.sleep(0.01)
            queue.put_nowait({"type": "http.disconnect"})
            await asyncio.wait_for(serving, 10)
        await asyncio.sleep(0.5)  # a run let in once the slot is freed would start now

    asyncio.run(scenario())
    return started


@override_settings(AGENTS_MAX_RUNS_PER_HOST=1)
def test_an_exec_whose_client_left_while_it_waited_never_runs(owner, monkeypatch) -> None:
    assert exec_gone_while_waiting(owner, monkeypatch) == []


@pytest.mark.sabotage
@override_settings(AGENTS_MAX_RUNS_PER_HOST=1)
def test_sabotage_with_a_deaf_watcher_the_exec_runs_for_nobody(owner, monkeypatch) -> None:
    async def deaf(receive: Any, answering: Any, gone: Any) -> None:
        await receive()

    monkeypatch.setattr(direct_view, "disconnect_watch", deaf)
    with pytest.raises(AssertionError, match="an answer to a client that left"):
        exec_gone_while_waiting(owner, monkeypatch)
