"""Passing a session request to its holder: what is sent, what comes back, and no loops.

The peer is a real local HTTP server that records what it receives."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from webapp.agents.schemas import ApiError
from webapp.agents.session_forward import FORWARDED_HEADER, served_by_holder
from webapp.agents.session_services import HeldByPeer


class Peer(ThreadingHTTPServer):
    received: list[dict[str, Any]]


class PeerHandler(BaseHTTPRequestHandler):
    server: Peer

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.server.received.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": dict(self.headers),
                "body": self.rfile.read(length),
            }
        )
        self.send_response(409)
        self.send_header("Content-Type", "application/json")
        self.send_header("Retry-After", "7")
        self.send_header("X-Exit-Code", "3")
        self.send_header("Set-Cookie", "peer=1")
        self.end_headers()
        self.wfile.write(b'{"error": "busy"}')

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def peer() -> Iterator[Peer]:
    server = Peer(("127.0.0.1", 0), PeerHandler)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def held_by(address: str):  # type: ignore[no-untyped-def]
    @served_by_holder
    async def view(request: HttpRequest, session_id: str) -> HttpResponse:
        raise HeldByPeer(address, "web-1:42")

    return view


def peer_url(peer: Peer) -> str:
    return f"http://127.0.0.1:{peer.server_address[1]}"


async def test_it_sends_the_request_on_and_answers_with_the_holders_reply(peer: Peer) -> None:
    body = bytes(range(256))
    request = RequestFactory().put(
        "/api/v1/sessions/s1/files/a%20b.bin?x=1",
        data=body,
        content_type="application/octet-stream",
        headers={"Authorization": "Bearer udb_secret", "Accept": "*/*", "Cookie": "sessionid=zz"},
    )
    response = await held_by(peer_url(peer))(request, session_id="s1")

    (sent,) = peer.received
    assert (sent["method"], sent["path"], sent["body"]) == (
        "PUT",
        "/api/v1/sessions/s1/files/a%20b.bin?x=1",
        body,
    )
    assert sent["headers"]["Authorization"] == "Bearer udb_secret"
    assert sent["headers"]["Content-Type"] == "application/octet-stream"
    assert sent["headers"][FORWARDED_HEADER]
    assert sent["headers"]["Host"] == "testserver"  # the client's, not the peer's address
    assert "Cookie" not in sent["headers"]  # only the API's own credentials travel
    assert (response.status_code, response.content) == (409, b'{"error": "busy"}')
    assert (response["Retry-After"], response["X-Exit-Code"]) == ("7", "3")
    assert not response.has_header("Set-Cookie")


async def test_a_request_that_was_already_passed_on_is_not_passed_again(peer: Peer) -> None:
    request = RequestFactory().get("/api/v1/sessions/s1", headers={FORWARDED_HEADER: "web-0:1"})

    with pytest.raises(ApiError) as refused:
        await held_by(peer_url(peer))(request, session_id="s1")

    assert refused.value.status == 503
    assert peer.received == []


async def test_a_holder_that_does_not_answer_is_a_503_to_retry() -> None:
    request = RequestFactory().post(
        "/api/v1/sessions/s1/exec", data=b"{}", content_type="application/json"
    )

    with pytest.raises(ApiError) as refused:
        await held_by("http://127.0.0.1:9")(request, session_id="s1")

    assert (refused.value.status, refused.value.retry_after_s) == (503, 1)
