"""The run websocket compares the Origin's scheme, host AND port with the site's own origin.

Cookies are not scoped by port: a page on another port of the same host sends the victim's
session cookie with its handshake, so only the Origin tells it apart from our own page.
"""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client, override_settings

from tests.factories import RunFactory
from webapp import routing
from webapp.asgi import application
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)
HOST = b"127.0.0.1:8000"
TIMEOUT = 30


@database_sync_to_async
def owned_run_and_cookie() -> tuple[int, bytes]:
    run = RunFactory(status=RunStatus.SUCCEEDED, exit_code=0)
    client = Client()
    client.force_login(run.query.owner)
    name = settings.SESSION_COOKIE_NAME
    return run.pk, f"{name}={client.cookies[name].value}".encode()


async def handshake(origin: bytes, host: bytes = HOST, extra: list[Any] | None = None) -> bool:
    """Whether the owner's browser, on a page at `origin`, gets the run's output."""
    run_id, cookie = await owned_run_and_cookie()
    headers = [(b"origin", origin), (b"host", host), (b"cookie", cookie), *(extra or [])]
    communicator = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers)
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    await communicator.disconnect()
    return connected


async def test_it_accepts_the_sites_own_origin() -> None:
    assert await handshake(b"http://127.0.0.1:8000")


@pytest.mark.parametrize(
    "origin",
    [
        b"http://127.0.0.1:9000",  # same host, another port
        b"http://127.0.0.1",  # same host, default port
        b"https://127.0.0.1:8000",  # another scheme
        b"http://localhost:8000",  # an allowed host, but not the one the page is on
        b"null",
        b"",
    ],
)
async def test_it_refuses_a_page_of_another_origin_on_the_same_machine(origin: bytes) -> None:
    assert not await handshake(origin)


async def test_it_refuses_a_rebound_name_the_site_does_not_answer_to() -> None:
    # DNS rebinding: evil.test:8000 resolved to us is "same origin" with its own Host header.
    assert not await handshake(b"http://evil.test:8000", host=b"evil.test:8000")


@override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"))
async def test_behind_a_tls_proxy_the_https_origin_is_the_sites_own() -> None:
    assert await handshake(b"https://127.0.0.1:8000", extra=[(b"x-forwarded-proto", b"https")])


@override_settings(CSRF_TRUSTED_ORIGINS=["https://undoable.example.com"])
async def test_a_trusted_origin_counts_only_with_its_own_port() -> None:
    # A proxy that rewrites Host: the page's origin is one of CSRF_TRUSTED_ORIGINS.
    assert await handshake(b"https://undoable.example.com", host=b"web:8000")
    assert await handshake(b"https://undoable.example.com:443", host=b"web:8000")
    assert not await handshake(b"https://undoable.example.com:8443", host=b"web:8000")


@pytest.mark.sabotage
async def test_sabotage_without_the_port_comparison_another_ports_page_reads_the_run(
    monkeypatch,
) -> None:
    monkeypatch.setattr(routing, "_same_port", lambda a, b: True)
    assert await handshake(b"http://127.0.0.1:9000")
