"""The rest kind's proxy sends a plain-http request on as one checked request of its own: `Host:`
is the checked authority whatever the program wrote, and nothing after the first request's body
reaches the upstream. Real sandboxes, the real proxy, a real local upstream that says what it got.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from executor.kinds import egress, egress_http
from executor.kinds.sandbox import sandbox_host_uid
from executor.spec import RunSpec
from tests.fakes.header_echo_server import HeaderEchoServer

# The program speaks HTTP itself to the in-sandbox forwarder, so nothing tidies its head.
RAW = r"""
import os, socket
up = os.environ["UPSTREAM"]

def send(raw):
    sock = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    sock.sendall(raw.encode())
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
            sock.settimeout(2)  # an upstream that keeps the connection open (the sabotage)
    except TimeoutError:
        pass
    return got.decode("latin-1")
"""
SPOOFED_HOST = (
    RAW
    + r"""
print(send(f"POST {up}/spoof HTTP/1.1\r\nHost: other.example\r\n"
           "Content-Length: 5\r\n\r\nhello").split("\r\n")[0])
# RFC 9112 3.2: two Host lines are refused, not chosen from.
print(send(f"GET {up}/twice HTTP/1.1\r\nHost: other.example\r\nHost: third.example\r\n\r\n")
      .split("\r\n")[0])
import requests
print(requests.get(up + "/library", headers={"Host": "other.example"}, timeout=10).status_code)
"""
)
PIPELINED = (
    RAW
    + r"""
first = f"GET {up}/first HTTP/1.1\r\nHost: other.example\r\n\r\n"
second = f"GET {up}/second HTTP/1.1\r\nHost: other.example\r\n\r\n"
third = "GET /third HTTP/1.1\r\nHost: other.example\r\n\r\n"
print(send(first + second + third).count("HTTP/1.1 200"))
"""
)
CHUNKED = (
    RAW
    + r"""
print(send(f"POST {up}/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
           "Content-Length: 3\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\n"
           "Proxy-Authorization: Basic eDp5\r\n\r\n5\r\nhello\r\n0\r\n\r\n").split("\r\n")[0])
"""
)


@pytest.fixture
def upstream() -> Iterator[HeaderEchoServer]:
    with HeaderEchoServer() as server:
        yield server


def run(backend, limits, place, upstream: HeaderEchoServer, code: str) -> str:
    spec = RunSpec(
        code=code, allowed_hosts=(upstream.authority,), env={"UPSTREAM": upstream.base_url}
    )
    uid = sandbox_host_uid(backend)
    with egress.prepared(
        spec, limits=limits, control_base=place, uid=uid, allow_private=True
    ) as job:
        result = backend.run(job.spec, limits=job.limits, mounts=job.mounts)
        assert job.finish(result) == []
    assert result.ok, result.stderr
    return result.stdout


def headers(request: dict, name: str) -> list[str]:
    return [value for key, value in request["headers"] if key.lower() == name]


def test_the_upstream_sees_the_checked_authority_not_the_programs_host(
    backend, limits, place, upstream
):
    answers = run(backend, limits, place, upstream, SPOOFED_HOST).splitlines()
    assert answers == ["HTTP/1.1 200 OK", "HTTP/1.1 403 Forbidden", "200"]
    (spoof,) = upstream.seen("/spoof")
    assert headers(spoof, "host") == [upstream.authority]
    assert spoof["body"] == "hello"
    assert upstream.seen("/twice") == []
    (library,) = upstream.seen("/library")
    assert headers(library, "host") == [upstream.authority]


def test_a_second_request_on_the_connection_never_reaches_the_upstream(
    backend, limits, place, upstream
):
    assert run(backend, limits, place, upstream, PIPELINED) == "1\n"
    assert [r["path"] for r in upstream.requests] == ["/first"]
    assert headers(upstream.requests[0], "connection") == ["close"]


def test_a_chunked_body_goes_on_chunked_only_without_hop_by_hop_headers(
    backend, limits, place, upstream
):
    assert run(backend, limits, place, upstream, CHUNKED) == "HTTP/1.1 200 OK\n"
    (sent,) = upstream.seen("/chunked")
    assert headers(sent, "transfer-encoding") == ["chunked"]
    for gone in ("content-length", "x-secret", "proxy-authorization"):
        assert headers(sent, gone) == [], gone


class _AsWritten:
    """The proxy before this protection: the program's head and bytes passed on as they came."""

    def __init__(self, head: bytes, *, max_head: int) -> None:
        line, _, self.rest = head.partition(b"\r\n")
        self.method, self.target, self.version = line.decode().split(" ")
        self.done = False

    def start(self, *, host: str, port: int, path: str) -> bytes:
        return f"{self.method} {path} {self.version}\r\n".encode() + self.rest

    def __call__(self, chunk: bytes) -> bytes:
        return chunk


@pytest.mark.sabotage
def test_sabotage_with_the_head_passed_on_the_programs_host_and_requests_get_through(
    backend, limits, place, upstream, monkeypatch
):
    monkeypatch.setattr(egress_http, "ForwardedRequest", _AsWritten)
    run(backend, limits, place, upstream, SPOOFED_HOST)
    assert headers(upstream.seen("/spoof")[0], "host") == ["other.example"]
    run(backend, limits, place, upstream, PIPELINED)
    reached = [r["path"].rpartition("/")[2] for r in upstream.requests]
    assert {"second", "third"} <= set(reached)
