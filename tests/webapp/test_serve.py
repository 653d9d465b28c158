"""The web server as the product starts it (`python -m webapp.server.serve`, embedded mode, real
bwrap sandboxes) under 1,100 idle TCP connections nobody logged in for: started with the usual soft
open-files limit of 1,024, it raises its own, keeps answering the API, closes the connections
that send no request head, and refuses connections past its cap at once."""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from tests.local_servers import wait_until
from tests.webapp.fresh_interpreter import probe_state
from tests.webapp.live_server import healthy, serving, template_fixture  # noqa: F401
from webapp.rlimits import open_files_limit_raise
from webapp.server import serve

IDLE = 1_100
HEAD_TIMEOUT_S = 10.0
EARLIEST_CLOSE_S = HEAD_TIMEOUT_S * (1 - serve.HEAD_DEADLINE_SPREAD)
# Idle connections come from 127.0.0.2 and up, this many from each, under the cap per address.
IDLE_PER_ADDRESS = 200


def open_idle(url: str, count: int, *, per_address: int = IDLE_PER_ADDRESS) -> list[socket.socket]:
    """`count` connections that never send a byte, `per_address` from each of 127.0.0.2 on."""
    port = int(url.rsplit(":", 1)[1])
    sockets = []
    for n in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((f"127.0.0.{2 + n // per_address}", 0))
        sock.connect_ex(("127.0.0.1", port))
        sockets.append(sock)
    return sockets


def closed_by_server(sockets: list[socket.socket], *, want: int, timeout_s: float) -> set[int]:
    """Indexes of the sockets the server closed, once `want` of them are or after `timeout_s`."""
    poller = select.poll()
    index = {sock.fileno(): i for i, sock in enumerate(sockets)}
    for fd in index:
        poller.register(fd, select.POLLIN)
    closed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while True:
        for fd, _ in poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            poller.unregister(fd)
            closed.add(index[fd])
        if len(closed) >= want or time.monotonic() >= deadline:
            return closed


def api(url: str, token: str, path: str, body: dict[str, object], timeout_s: float) -> int | str:
    """The status of a POST to the API, or the name of the error that stopped it (a timeout, a
    connection closed with no answer)."""
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    try:
        return httpx.post(url + path, json=body, headers=headers, timeout=timeout_s).status_code
    except httpx.TransportError as exc:
        return type(exc).__name__


@pytest.fixture
def many_files() -> None:
    open_files_limit_raise()  # this process's end of every idle connection is a descriptor too


def test_exec_and_sessions_answer_past_1100_idle_connections_that_the_head_timeout_closes(
    template, tmp_path, many_files
):
    options = ("--head-timeout-s", str(HEAD_TIMEOUT_S))
    with serving(template, tmp_path, *options, open_files=(1024, 4096)) as url:
        opened = time.monotonic()
        idle = open_idle(url, IDLE)
        exec_status = api(url, template.token, "/api/v1/exec", {"code": "print(6*7)"}, 30)
        session_status = api(url, template.token, "/api/v1/sessions", {}, 30)
        answered_s = time.monotonic() - opened
        still_open = IDLE - len(closed_by_server(idle, want=IDLE, timeout_s=0))
        closed = closed_by_server(idle, want=IDLE, timeout_s=HEAD_TIMEOUT_S + 10)
        closed_s = time.monotonic() - opened
    assert (exec_status, session_status, still_open) == (200, 201, IDLE), answered_s
    assert (len(closed), closed_s >= EARLIEST_CLOSE_S) == (IDLE, True)


def test_connections_past_the_cap_are_closed_at_once_and_a_freed_slot_serves_again(
    template, tmp_path
):
    options = ("--max-connections", "20", "--head-timeout-s", "60")
    with serving(template, tmp_path, *options, open_files=(1024, 4096)) as url:
        idle = open_idle(url, 25)
        refused = closed_by_server(idle, want=5, timeout_s=5)
        still_open = 25 - len(closed_by_server(idle, want=25, timeout_s=0))
        for sock in idle:
            sock.close()
        wait_until(lambda: healthy(url), timeout_s=10, what="a freed slot")
    assert (refused, still_open) == (set(range(20, 25)), 20)


def test_bodies_larger_than_a_head_reach_the_app_through_the_server(template, tmp_path):
    """A program with a file of 1 MB runs; a program past the API's code cap, or a body past its
    cap, gets the API's 413, not the server's 431 for a head too large."""
    files = {"code": "print(len(open('big').read()))", "files": {"big": "x" * 1_000_000}}
    with serving(template, tmp_path, open_files=(1024, 4096)) as url:
        ran = api(url, template.token, "/api/v1/exec", files, 30)
        refused = api(url, template.token, "/api/v1/exec", {"code": "#" * 300_000}, 30)
        too_large = api(url, template.token, "/api/v1/exec", {"code": "#" * 5_000_000}, 30)
    assert (ran, refused, too_large) == (200, 413, 413)


@pytest.mark.sabotage
def test_sabotage_with_no_limits_and_1024_files_idle_connections_starve_exec(
    template, tmp_path, many_files
):
    options = ("--head-timeout-s", "0", "--idle-timeout-s", "0", "--max-connections", "0")
    with serving(template, tmp_path, *options, open_files=(1024, 1024)) as url:
        idle = open_idle(url, IDLE)
        exec_status = api(url, template.token, "/api/v1/exec", {"code": "print(6*7)"}, 5)
        for sock in idle:
            sock.close()
    # How it fails depends on where the server runs out of descriptors (a 500, a reset, a
    # hang); that it is not served is the breach.
    assert exec_status not in {200, 201}, exec_status


class FakeLoop:
    """The event loop as a connection's protocol uses it, with a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.now + delay, callback)
        self.timers.append(timer)
        return timer

    def create_task(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Future[None]:
        coroutine.close()  # the app is not run here: only the connection's limits are
        return asyncio.Future(loop=asyncio.new_event_loop())

    def advance_to(self, when: float) -> None:
        self.now = when
        for timer in [t for t in self.timers if not t.cancelled and t.when <= when]:
            timer.cancelled = True
            timer.callback()


@dataclass
class FakeTimer:
    when: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTransport(asyncio.Transport):
    def __init__(self, peer: str = "127.0.0.1") -> None:
        super().__init__()
        self.peer = peer
        self.closed = False
        self.written = b""
        self.protocol: asyncio.BaseProtocol | None = None

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": (self.peer, 50000)}.get(name)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _no_app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("not run")


def connections(
    count: int, *options: str, peers: list[str] | None = None
) -> tuple[FakeLoop, list[FakeTransport]]:
    """`count` connections made at once to the protocol webapp.server.serve configures uvicorn with
    (`options` as on its command line), on a fake loop, from `peers` (default: 127.0.0.1)."""
    config = serve.config_from(list(options))
    config.app = _no_app
    config.load()
    loop, state = FakeLoop(), ServerState()
    transports = []
    for n in range(count):
        protocol = config.http_protocol_class(
            config=config, server_state=state, app_state={}, _loop=loop
        )
        transport = FakeTransport(peers[n] if peers else "127.0.0.1")
        protocol.connection_made(transport)
        transport.set_protocol(protocol)
        if transport.closed:  # refused: the loop reports the close to the protocol
            protocol.connection_lost(None)
        transports.append(transport)
    return loop, transports


def test_connections_past_the_cap_per_address_are_closed_and_other_addresses_served():
    peers = ["10.0.0.1"] * 5 + ["10.0.0.2"]
    loop, transports = connections(6, "--max-connections-per-address", "3", peers=peers)
    assert [t.closed for t in transports] == [False] * 3 + [True] * 2 + [False]


def test_a_connection_lost_gives_its_address_its_slot_back():
    config = serve.config_from(["--max-connections-per-address", "1"])
    config.app = _no_app
    config.load()
    loop, state = FakeLoop(), ServerState()

    def connect() -> FakeTransport:
        protocol = config.http_protocol_class(
            config=config, server_state=state, app_state={}, _loop=loop
        )
        transport = FakeTransport("10.0.0.1")
        protocol.connection_made(transport)
        transport.set_protocol(protocol)
        return transport

    first, second = connect(), connect()
    first.get_protocol().connection_lost(None)
    assert (second.closed, connect().closed) == (True, False)


def test_behind_a_proxy_no_cap_applies_per_address():
    options = ("--max-connections-per-address", "3", "--proxy-headers")
    _, transports = connections(6, *options, peers=["10.0.0.1"] * 6)
    assert not any(t.closed for t in transports)


def test_an_ipv6_client_is_counted_by_its_64_and_an_ipv4_mapped_one_by_its_ipv4_address():
    assert serve.address_key("2001:db8::1") == serve.address_key("2001:db8::ffff:1")
    assert serve.address_key("2001:db8::1") != serve.address_key("2001:db8:0:1::1")
    assert serve.address_key("::ffff:10.0.0.1") == serve.address_key("10.0.0.1") == "10.0.0.1"


def test_one_address_cannot_take_every_connection():
    options = ("--max-connections-per-address", "3", "--max-connections", "6")
    _, transports = connections(7, *options, peers=["10.0.0.1"] * 6 + ["10.0.0.2"])
    assert not transports[-1].closed


@pytest.mark.sabotage
def test_sabotage_with_no_cap_per_address_one_address_takes_every_connection():
    options = ("--max-connections-per-address", "0", "--max-connections", "6")
    _, transports = connections(7, *options, peers=["10.0.0.1"] * 6 + ["10.0.0.2"])
    assert transports[-1].closed


def closing_times(count: int, loop: FakeLoop, transports: list[FakeTransport], until_s: float):
    """When each connection was closed, moving the clock a tenth of a second at a time."""
    closed_at: dict[int, float] = {}
    for tenth in range(1, int(until_s * 10) + 1):
        loop.advance_to(tenth / 10)
        for n, transport in enumerate(transports):
            if transport.closed and n not in closed_at:
                closed_at[n] = tenth / 10
    return sorted(closed_at.values())


def test_connections_opened_together_are_closed_over_seconds_not_in_one_turn():
    """200 connections opened at once, none sending a head: each is closed by its deadline
    (10 s), none before half of it, and no tenth of a second closes more than a tenth of them,
    so the loop's other requests never wait for all the closes at once."""
    loop, transports = connections(200, "--head-timeout-s", "10")
    closed = closing_times(200, loop, transports, until_s=11)
    assert len(closed) == 200 and min(closed) >= 5.0 and max(closed) <= 10.0
    assert max(closed.count(t) for t in set(closed)) <= 20


@pytest.mark.sabotage
def test_sabotage_with_no_spread_every_connection_is_closed_in_the_same_turn(monkeypatch):
    monkeypatch.setattr(serve, "HEAD_DEADLINE_SPREAD", 0.0)
    loop, transports = connections(200, "--head-timeout-s", "10")
    closed = closing_times(200, loop, transports, until_s=11)
    assert max(closed.count(t) for t in set(closed)) > 20


def drip(loop: FakeLoop, transport: FakeTransport, data: bytes, every_s: float, until_s: float):
    """Send `data` a byte every `every_s` seconds; when the server closed the connection, or
    None."""
    for n, byte in enumerate(data):
        if n * every_s > until_s:
            break
        loop.advance_to(n * every_s)
        if transport.closed:
            return loop.now
        transport.get_protocol().data_received(  # type: ignore[attr-defined]
            bytes([byte])
        )
    loop.advance_to(until_s)
    return loop.now if transport.closed else None


SLOW_HEAD = b"GET /healthz HTTP/1.1\r\nHost: a\r\n" + b"X-Pad: " + b"a" * 500


def test_a_head_sent_a_byte_at_a_time_is_cut_off_at_its_deadline():
    loop, (transport,) = connections(1, "--head-timeout-s", "10")
    closed_s = drip(loop, transport, SLOW_HEAD, every_s=1.0, until_s=60)
    assert closed_s is not None and 5.0 <= closed_s <= 11.0


@pytest.mark.sabotage
def test_sabotage_without_the_head_deadline_a_dripped_head_holds_its_connection(monkeypatch):
    """uvicorn's own keep-alive timer is cancelled by the first byte: it alone never closes."""
    monkeypatch.setattr(serve.LimitedHttpProtocol, "_head_deadline_set", lambda self, t: None)
    loop, (transport,) = connections(1, "--head-timeout-s", "10")
    assert drip(loop, transport, SLOW_HEAD, every_s=1.0, until_s=60) is None


SLOW_BODY = b"POST /api/v1/exec HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n"


def test_a_body_that_stops_coming_is_cut_off_after_the_idle_timeout():
    loop, (transport,) = connections(1, "--idle-timeout-s", "20")
    transport.get_protocol().data_received(SLOW_BODY + b"x" * 50)
    loop.advance_to(19.0)
    assert not transport.closed
    loop.advance_to(21.0)
    assert transport.closed


@pytest.mark.sabotage
def test_sabotage_without_the_body_deadline_a_stalled_body_holds_its_connection(monkeypatch):
    monkeypatch.setattr(serve.LimitedHttpProtocol, "_deadline_set", lambda self, t: None)
    loop, (transport,) = connections(1, "--idle-timeout-s", "20")
    transport.get_protocol().data_received(SLOW_BODY + b"x")
    loop.advance_to(3600.0)
    assert not transport.closed


TRICKLED_BODY = b"POST /api/v1/exec HTTP/1.1\r\nHost: a\r\nContent-Length: 4000000\r\n\r\n"


def test_a_body_trickled_below_the_minimum_rate_is_cut_off_after_its_grace():
    """A byte every 2 s restarts no deadline that matters: once the first 20 s (the idle
    timeout) have passed, the body must average --body-min-rate bytes a second."""
    loop, (transport,) = connections(1, "--idle-timeout-s", "20")
    transport.get_protocol().data_received(TRICKLED_BODY)
    closed_s = drip(loop, transport, b"x" * 100, every_s=2.0, until_s=120.0)
    assert closed_s is not None and 20.0 <= closed_s <= 22.0


def test_a_body_at_the_minimum_rate_is_read_to_its_end():
    loop, (transport,) = connections(1, "--idle-timeout-s", "20", "--body-min-rate", "100")
    protocol = transport.get_protocol()
    protocol.data_received(SLOW_BODY.replace(b"100", b"3000"))
    for second in range(30):
        loop.advance_to(float(second))
        assert not transport.closed
        protocol.data_received(b"x" * 100)
    assert not protocol._reading_body


@pytest.mark.sabotage
def test_sabotage_without_a_minimum_rate_a_trickled_body_holds_its_connection():
    loop, (transport,) = connections(1, "--idle-timeout-s", "20", "--body-min-rate", "0")
    transport.get_protocol().data_received(TRICKLED_BODY)
    assert drip(loop, transport, b"x" * 100, every_s=2.0, until_s=120.0) is None


def test_a_head_past_its_cap_is_answered_431_and_closed():
    loop, (transport,) = connections(1)
    protocol = transport.get_protocol()
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: a\r\n")
    for _ in range(serve.MAX_HEAD_BYTES // 1000 + 1):
        if transport.closed:
            break
        protocol.data_received(b"X-Pad: " + b"a" * 991 + b"\r\n")
    assert transport.closed and transport.written.startswith(b"HTTP/1.1 431 ")


@pytest.mark.sabotage
def test_sabotage_with_no_head_cap_the_head_grows_unbounded(monkeypatch):
    monkeypatch.setattr(serve, "MAX_HEAD_BYTES", 10**12)
    loop, (transport,) = connections(1)
    protocol = transport.get_protocol()
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: a\r\n")
    for _ in range(serve.MAX_HEAD_BYTES // 1000 + 1 if serve.MAX_HEAD_BYTES < 10**6 else 100):
        protocol.data_received(b"X-Pad: " + b"a" * 991 + b"\r\n")
    assert not transport.closed


def big_post(body_bytes: int) -> tuple[bytes, bytes]:
    """A POST's head and a JSON body of `body_bytes`, larger than any head may be."""
    body = b'{"code": "' + b"#" * (body_bytes - 12) + b'"}'
    head = b"POST /api/v1/exec HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(body)
    return head, body


def sent_in_chunks(data: bytes, chunk: int) -> FakeTransport:
    """`data` sent to a new connection `chunk` bytes at a time, as the socket's reads hand it
    over; the connection."""
    _, (transport,) = connections(1)
    for start in range(0, len(data), chunk):
        transport.get_protocol().data_received(data[start : start + chunk])  # type: ignore[attr-defined]
    return transport


@pytest.mark.parametrize("chunk", [256 * 1024, 64 * 1024, 1000])
def test_a_body_larger_than_a_head_may_be_is_no_head_past_its_cap(chunk):
    """uvloop reads up to 256 KiB at a time: the head and much of the body arrive together."""
    head, body = big_post(4 * serve.MAX_HEAD_BYTES)
    transport = sent_in_chunks(head + body, chunk)
    assert (transport.closed, transport.written) == (False, b"")


@pytest.mark.sabotage
def test_sabotage_counting_every_byte_received_answers_a_large_body_431(monkeypatch):
    """Every byte received counted as head, as the cap first did (before the parser saw them)."""
    monkeypatch.setattr(
        serve.LimitedHttpProtocol, "on_headers_complete", HttpToolsProtocol.on_headers_complete
    )
    head, body = big_post(4 * serve.MAX_HEAD_BYTES)
    transport = sent_in_chunks(head + body, 256 * 1024)
    assert transport.written.startswith(b"HTTP/1.1 431 ")


def test_a_pipelined_request_after_a_large_one_is_not_counted_against_the_next_head():
    head, body = big_post(serve.MAX_HEAD_BYTES)
    transport = sent_in_chunks(head + body + b"GET /healthz HTTP/1.1\r\n", 256 * 1024)
    assert (transport.closed, transport.written) == (False, b"")


def body_sent_after_its_answer() -> FakeTransport:
    """A large POST answered after its head and first bytes, as uvicorn does when the app
    answers before reading the whole body (a 413 for a body declared too large); then the rest
    of its body sent, 64 KiB at a time. The connection."""
    head, body = big_post(4 * serve.MAX_HEAD_BYTES)
    _, (transport,) = connections(1)
    protocol = transport.get_protocol()
    protocol.data_received(head + body[:1000])
    protocol.cycle.response_complete = True
    protocol.on_response_complete()
    for start in range(1000, len(body), 64 * 1024):
        protocol.data_received(body[start : start + 64 * 1024])
    return transport


def test_the_rest_of_a_body_answered_early_is_no_head_and_the_connection_serves_on():
    transport = body_sent_after_its_answer()
    protocol = transport.get_protocol()
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
    assert (transport.closed, transport.written) == (False, b"")
    assert protocol.cycle.scope["path"] == "/healthz"  # the next request was read


@pytest.mark.sabotage
def test_sabotage_awaiting_the_next_head_at_once_answers_the_rest_of_the_body_431(monkeypatch):
    def at_once(self: serve.LimitedHttpProtocol) -> None:
        HttpToolsProtocol.on_response_complete(self)
        self._next_head_await()

    monkeypatch.setattr(serve.LimitedHttpProtocol, "on_response_complete", at_once)
    transport = body_sent_after_its_answer()
    assert transport.written.startswith(b"HTTP/1.1 431 ")


SWITCH_INTERVAL_PROBE = """
import json, sys
import uvicorn
import webapp.server.serve
uvicorn.Server.run = lambda self, sockets=None: None  # the set-up main() does, not the serving
webapp.server.serve.main([])
print(json.dumps(sys.getswitchinterval()))
"""


def test_the_server_hands_the_gil_to_waiting_threads_within_a_millisecond(tmp_path):
    """The server's requests hop between its event loop and worker threads; a hop waits for the
    GIL at most the switch interval, which the server lowers from Python's 5 ms."""
    assert probe_state(SWITCH_INTERVAL_PROBE, tmp_path) == pytest.approx(0.001)


def answered_early(declared: int) -> tuple[FakeLoop, FakeTransport]:
    """A POST declaring `declared` bytes of body, answered after its first 1,000 (as the app
    answers a 401 or a 413 from the head) at time 0."""
    loop, (transport,) = connections(1)
    protocol = transport.get_protocol()
    protocol.data_received(b"POST /api/v1/exec HTTP/1.1\r\nHost: a\r\n")
    protocol.data_received(b"Content-Length: %d\r\n\r\n" % declared + b"x" * 1000)
    protocol.cycle.response_complete = True
    protocol.on_response_complete()
    return loop, transport


def test_the_rest_of_a_body_answered_early_is_read_for_10_s_at_most():
    loop, transport = answered_early(4 * 1024 * 1024)
    closed_s = drip(loop, transport, b"x" * 100, every_s=0.5, until_s=60.0)
    assert closed_s is not None and 9.0 <= closed_s <= serve.DRAIN_TIMEOUT_S + 0.5


@pytest.mark.sabotage
def test_sabotage_with_no_drain_deadline_the_rest_of_a_body_holds_on(monkeypatch):
    monkeypatch.setattr(serve, "DRAIN_TIMEOUT_S", 3600.0)
    loop, transport = answered_early(4 * 1024 * 1024)
    closed_s = drip(loop, transport, b"x" * 100, every_s=0.5, until_s=60.0)
    assert closed_s is None or closed_s > 10.5


def test_a_body_declared_past_what_is_drained_is_closed_with_its_answer():
    _, transport = answered_early(serve.DRAIN_MAX_BYTES + 2000)
    assert transport.closed


def test_a_body_within_what_is_drained_keeps_its_connection_open_after_the_answer():
    _, transport = answered_early(serve.DRAIN_MAX_BYTES)
    assert not transport.closed


def test_a_client_answered_before_its_100_continue_is_closed_with_its_answer():
    _, (transport,) = connections(1)
    protocol = transport.get_protocol()
    protocol.data_received(
        b"POST /api/v1/exec HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
        b"Content-Length: 1000\r\n\r\n"
    )
    protocol.cycle.response_complete = True
    protocol.on_response_complete()
    assert transport.closed
