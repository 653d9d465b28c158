"""`python -m webapp.server.serve [-b HOST] [-p PORT] [--proxy-headers] [limits] [application]`: the
app under uvicorn (httptools, uvloop), with what uvicorn lacks in front of it: a deadline for each
request head, a cap on its size, a minimum rate and an idle deadline for a request body, the
rest of a body answered early read and dropped (within bounds) so that its client reads the
answer, and caps on open connections, in all and per client address, that close the excess at
once.

`make run`, the Docker image, docker-compose.yml and the tests' live servers all start the web
server through here, so they run with the same limits. An idle connection holds a descriptor;
these limits, and the open-files limit webapp.asgi raises, keep descriptors for the sandboxes.
uvicorn rather than daphne: less of the server's CPU per API request, and the way to a thinner
path for it (docs/benchmarks.md, "uvicorn instead of daphne").
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import math
import os
import random
import resource
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from webapp.body_caps import declared_length
from webapp.reliability.management.commands.migrate import var_dir_setup
from webapp.server.draining import DrainingServer

logger = logging.getLogger("webapp.server.serve")  # also when run as __main__

APPLICATION = "webapp.asgi:application"
HEAD_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 20.0
MAX_CONNECTIONS = 4096
# One client address (an IPv6 client: its /64, which one host usually has whole) may hold this
# many of them, so that a few addresses cannot take every connection. Behind a proxy every
# connection comes from the proxy: there the cap is the proxy's to keep (--proxy-headers).
MAX_CONNECTIONS_PER_ADDRESS = 256
# A request body must average this many bytes a second once its first idle_timeout_s has
# passed: each byte restarting a deadline let a body of a byte every few seconds hold its
# connection for as long as its Content-Length lasted.
BODY_MIN_RATE = 4096
# What is left of a body the app answered before reading it all (401, 413) is read and dropped
# for at most this long and this many bytes, then the connection is closed. A client that
# writes its whole body before it reads (urllib, requests) otherwise met a reset connection
# instead of the answer.
DRAIN_TIMEOUT_S = 10.0
DRAIN_MAX_BYTES = 64 * 1024 * 1024
# A request head (request line and headers) past this many bytes is answered 431 and closed.
# httptools sets no bound of its own, and the head is held in memory until it is complete.
MAX_HEAD_BYTES = 64 * 1024
# Each head deadline falls at a random point of its second half. Connections opened together
# (a client's pool, or a thousand idle sockets from one tenant) would otherwise all be closed in
# one turn of the event loop, then reopened together, again and again, and every request beside
# them would wait for those turns (docs/benchmarks.md, "Idle sockets dropped together").
HEAD_DEADLINE_SPREAD = 0.5
# A request hops between the event loop and worker threads (token lookup, admission, the run),
# and each hop waits for the GIL. Python hands it over only every 5 ms by default, so a loop busy
# with a burst (connections closed, a flood answered) made each hop of every other request wait
# that long; 1 ms bounds the wait (docs/benchmarks.md, "Idle sockets dropped together").
GIL_SWITCH_INTERVAL_S = 0.001
# A new connection past the listen backlog loses its handshake, and its client waits for a
# retransmission: room for a burst.
LISTEN_BACKLOG = 2048
# Descriptors the cap leaves for what requests open: sandboxes' pipes, the database, Redis, logs.
RESERVED_FDS = 512


@dataclass(frozen=True)
class ConnectionLimits:
    """The timeouts in seconds, None for none; the cap as asked for (see connection_cap)."""

    head_timeout_s: float | None
    idle_timeout_s: float | None
    max_connections: int | None
    max_connections_per_address: int | None = MAX_CONNECTIONS_PER_ADDRESS
    body_min_rate: float | None = BODY_MIN_RATE


class LimitedConfig(uvicorn.Config):
    """uvicorn's Config, carrying the limits to each connection's protocol."""

    def __init__(self, app: str, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        self.limits = limits
        self.connection_cap: int | None = None
        super().__init__(app, http=LimitedHttpProtocol, **kwargs)
        # Connections open per client address (address_key), when the cap per address applies:
        # not behind a proxy, where every connection has the proxy's address.
        per_address = limits.max_connections_per_address
        self.per_address: Counter[str] | None = (
            Counter() if per_address and not self.proxy_headers else None
        )

    def load(self) -> None:
        super().load()
        # Now that the app is imported: webapp.asgi raised the open-files limit, and set up
        # Django's logging.
        self.connection_cap = connection_cap(self.limits.max_connections)
        logger.info(
            "connection limits",
            extra={
                "head_timeout_s": self.limits.head_timeout_s,
                "idle_timeout_s": self.limits.idle_timeout_s,
                "max_connections": self.connection_cap,
                "max_connections_per_address": (
                    self.limits.max_connections_per_address
                    if self.per_address is not None
                    else None
                ),
                "body_min_rate": self.limits.body_min_rate,
            },
        )


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with the limits.

    uvicorn's own keep-alive timeout is cancelled by the first byte received, so a client that
    never finishes its head, sending a byte now and then, would hold its connection for good.
    Here the first head must be complete `head_timeout_s` after the connection opened, and each
    later one `idle_timeout_s` after the previous response, each deadline at a random point of
    the second half of that time (HEAD_DEADLINE_SPREAD). A request body must keep coming: it is
    cut off once no byte came for `idle_timeout_s`, or once it averages less than
    `body_min_rate` bytes a second after its first `idle_timeout_s`. What is left of a body the
    app answered before reading it all is read and dropped, for DRAIN_TIMEOUT_S and
    DRAIN_MAX_BYTES at most, and the connection closed after it if the request or its answer
    asked for that. Once a connection became a websocket, no deadline runs.
    """

    def __init__(self, config: LimitedConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)  # type: ignore[arg-type]
        self.limits = config.limits
        self.connection_cap = config.connection_cap
        self._deadline: asyncio.TimerHandle | None = None
        self.per_address = config.per_address
        self._address: str | None = None  # counted in per_address under this key
        self._head_bytes: int | None = 0  # None once the head is complete
        self._reading_body = False
        self._message_completed = False
        self._body = BodyProgress(declared=None, started_at=0.0)
        self._close_after_body = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.connection_cap is not None and len(self.connections) > self.connection_cap:
            transport.close()  # the client learns at once, and the server keeps its descriptors
            return
        if self.per_address is not None and self.client is not None:
            address = address_key(self.client[0])
            if self.per_address[address] >= (self.limits.max_connections_per_address or 0):
                transport.close()
                return
            self.per_address[address] += 1
            self._address = address
        self._head_deadline_set(self.limits.head_timeout_s)

    def data_received(self, data: bytes) -> None:
        self._message_completed = False
        super().data_received(data)
        if self._reading_body and not self.transport.is_closing():
            self._body_deadline_set()
        # Only bytes of a head count, and the parser says where one ends only through its
        # callbacks: a chunk counts in full while the head it carries is still incomplete after
        # it. A chunk that completed one message and began the next (pipelined) counts for
        # nothing; the next one counts in full, so a head is never held past one chunk more.
        if self._head_bytes is None or self.transport.is_closing():
            return
        if not self._message_completed:
            self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            self._deadline_cancel()
            self._reject_head()

    def on_message_begin(self) -> None:
        self._head_bytes = 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        self._reading_body = True
        self._body = BodyProgress(
            declared=declared_length(self.headers), started_at=self.loop.time()
        )
        self._body_deadline_set()
        super().on_headers_complete()
        if self.cycle is not None and self.cycle.scope is self.scope:
            # uvicorn closes the connection as soon as an answer that ends it is sent; with the
            # body still coming, that close waits for the body (BodyFirstTransport).
            self.cycle.transport = BodyFirstTransport(self)  # type: ignore[assignment]

    def on_body(self, body: bytes) -> None:
        self._body.received += len(body)
        if self._body.drain_until is not None and self._body.drained_past_bound():
            self.transport.close()
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._reading_body = False
        self._message_completed = True
        self._deadline_cancel()
        answered_early = self.cycle is not None and self.cycle.response_complete
        super().on_message_complete()
        if self._close_after_body:
            self._close_after_body = False
            self.transport.close()
        elif answered_early and not self.transport.is_closing():
            self._next_head_await()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._reading_body and not self.transport.is_closing():
            self.drain_begin()
        # uvicorn armed its keep-alive timer: no pipelined request was started. The connection
        # waits for its next head, unless the app answered before the body was all sent (a 413
        # for a body declared too large): the rest of the body comes first, and uvicorn drops it.
        if self.timeout_keep_alive_task is not None and not self._reading_body:
            self._next_head_await()

    def drain_begin(self) -> None:
        """The app answered before the body was all read: read and drop the rest, within
        DRAIN_TIMEOUT_S and DRAIN_MAX_BYTES; past either, or when the declared rest is past
        DRAIN_MAX_BYTES, close now (a client still writing then meets a reset)."""
        if self._body.drain_until is not None:
            return
        self._body.drain_begin(self.loop.time())
        # A client that asked to be told to go on before sending its body (`Expect:
        # 100-continue`), and was answered instead, sends none.
        expects_no_body = self.expect_100_continue and self._body.received == 0
        if expects_no_body or self._body.drained_past_bound():
            self.transport.close()
        else:
            self._body_deadline_set()

    def close_after_body(self) -> None:
        """Close the connection, once the request body has been read if it is still coming."""
        if self._reading_body and not self.transport.is_closing():
            self._close_after_body = True
            self.drain_begin()
        else:
            self.transport.close()

    def _next_head_await(self) -> None:
        self._head_bytes = 0
        self._head_deadline_set(self.limits.idle_timeout_s)

    def handle_websocket_upgrade(self) -> None:
        self._reading_body = False
        self._deadline_cancel()
        self._address_release()  # the websocket protocol takes the connection over
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline_cancel()
        self._address_release()
        super().connection_lost(exc)

    def _address_release(self) -> None:
        if self._address is not None and self.per_address is not None:
            self.per_address[self._address] -= 1
            if self.per_address[self._address] <= 0:
                del self.per_address[self._address]
            self._address = None

    def _reject_head(self) -> None:
        message = b"request head too large"
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(message), message)
        )
        self.transport.close()

    def _head_deadline_set(self, timeout_s: float | None) -> None:
        spread = random.uniform(1.0 - HEAD_DEADLINE_SPREAD, 1.0)  # noqa: S311 (not a secret)
        self._deadline_set(None if timeout_s is None else timeout_s * spread)

    def _body_deadline_set(self) -> None:
        now = self.loop.time()
        when = self._body.deadline(now, self.limits.idle_timeout_s, self.limits.body_min_rate)
        self._deadline_set(None if when is None else max(0.0, when - now))

    def _deadline_set(self, timeout_s: float | None) -> None:
        self._deadline_cancel()
        if timeout_s is not None:
            self._deadline = self.loop.call_later(timeout_s, self._late)

    def _deadline_cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


@dataclass
class BodyProgress:
    """A request body as it comes in: its declared length (None: chunked), when its head was
    complete, the bytes received; once the app answered, the drain's end and starting count."""

    declared: int | None
    started_at: float
    received: int = 0
    drain_until: float | None = None
    drain_from: int = 0

    def drain_begin(self, now: float) -> None:
        self.drain_until = now + DRAIN_TIMEOUT_S
        self.drain_from = self.received

    def drained_past_bound(self) -> bool:
        left = None if self.declared is None else self.declared - self.drain_from
        past = max(self.received - self.drain_from, left or 0)
        return past > DRAIN_MAX_BYTES

    def deadline(self, now: float, idle_s: float | None, min_rate: float | None) -> float | None:
        """When the connection is closed unless more of the body came: `idle_s` after now, or
        when the bytes so far fall below `min_rate` a second after a grace of `idle_s`, or at the
        drain's end; None for no deadline."""
        ends = [] if self.drain_until is None else [self.drain_until]
        if idle_s is not None:
            ends.append(now + idle_s)
            if min_rate is not None:
                ends.append(self.started_at + idle_s + self.received / min_rate)
        return min(ends, default=None)


class BodyFirstTransport:
    """The transport as uvicorn's request cycle sees it: a close asked for while the request
    body is still coming (an answer with `Connection: close`, or to a request that asked for it)
    waits until the body has been read (within the drain's bounds), so that the client, which
    may write its whole body before it reads, is not reset before it reads the answer."""

    def __init__(self, protocol: LimitedHttpProtocol) -> None:
        self._protocol = protocol
        self._transport = protocol.transport

    def close(self) -> None:
        self._protocol.close_after_body()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def address_key(host: str) -> str:
    """What connections are counted by: the client's IPv4 address, or its IPv6 /64."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # a Unix socket's peer, or a name
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def connection_cap(requested: int | None) -> int | None:
    """The cap asked for (0: none), or by default one that leaves RESERVED_FDS descriptors free
    under the open-files limit the process has when it starts listening (importing webapp.asgi
    raised it)."""
    if requested is not None:
        return requested or None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(1, min(MAX_CONNECTIONS, soft - RESERVED_FDS))


def _off_if_zero(value: float) -> float | None:
    return value or None


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m webapp.server.serve", description=__doc__)
    parser.add_argument("application", nargs="?", default=APPLICATION, help="module:attribute")
    parser.add_argument("-b", "--bind", default="127.0.0.1", help="address to listen on")
    parser.add_argument("-p", "--port", type=int, default=8000)
    parser.add_argument(
        "--proxy-headers",
        action="store_true",
        help="take the client's address and scheme from X-Forwarded-For and -Proto (behind a "
        "proxy that sets them)",
    )
    group = parser.add_argument_group("connection limits (0 turns one off)")
    group.add_argument(
        "--head-timeout-s",
        type=float,
        default=HEAD_TIMEOUT_S,
        help="close a connection whose request head is not complete this long after it "
        "opened, or sooner: at a random point of the second half (default %(default)s)",
    )
    group.add_argument(
        "--idle-timeout-s",
        type=float,
        default=IDLE_TIMEOUT_S,
        help="close a keep-alive connection with no complete next request head this long "
        "after its last response, and one whose request body stops coming for this long "
        "(default %(default)s)",
    )
    group.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help=f"refuse connections past this many open at once (default: {MAX_CONNECTIONS}, "
        f"or the open-files limit less {RESERVED_FDS} if that is lower)",
    )
    group.add_argument(
        "--max-connections-per-address",
        type=int,
        default=MAX_CONNECTIONS_PER_ADDRESS,
        help="refuse connections past this many open at once from one client address (an "
        "IPv6 client: its /64); not applied with --proxy-headers, where the proxy must keep "
        "such a cap (default %(default)s)",
    )
    group.add_argument(
        "--body-min-rate",
        type=float,
        default=BODY_MIN_RATE,
        help="close a connection whose request body averages fewer bytes a second than this "
        "once its first --idle-timeout-s has passed (default %(default)s)",
    )
    return parser


def config_from(argv: list[str]) -> LimitedConfig:
    options = parser().parse_args(argv)
    limits = ConnectionLimits(
        head_timeout_s=_off_if_zero(options.head_timeout_s),
        idle_timeout_s=_off_if_zero(options.idle_timeout_s),
        max_connections=options.max_connections,
        max_connections_per_address=options.max_connections_per_address or None,
        body_min_rate=_off_if_zero(options.body_min_rate),
    )
    idle_s = limits.idle_timeout_s
    return LimitedConfig(
        options.application,
        limits=limits,
        host=options.bind,
        port=options.port,
        loop="uvloop",
        ws="websockets-sansio",
        # Live output is small messages, latency first; and no compression beside secrets.
        ws_per_message_deflate=False,
        # webapp.asgi starts MCP's session manager at startup; "auto" rather than "on" for an
        # application without a lifespan of its own (the tests' sabotaged ones).
        lifespan="auto",
        log_config=None,  # Django's logging (webapp.json_logs), set up as the app loads
        access_log=False,
        server_header=False,
        proxy_headers=options.proxy_headers,
        forwarded_allow_ips="*" if options.proxy_headers else None,
        backlog=LISTEN_BACKLOG,
        # The protocol's own deadline closes an idle keep-alive connection first; uvicorn's
        # timer (whole seconds) is only a backstop.
        timeout_keep_alive=math.ceil(idle_s) + 1 if idle_s else 10**9,
    )


def main(argv: list[str] | None = None) -> None:
    # The state folders, as `manage.py migrate` sets them up: a web container runs no migrate.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    var_dir_setup()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    # Its shutdown drains within UNDOABLE_SHUTDOWN_GRACE_S, then ends the rest with a reason.
    DrainingServer(config_from(sys.argv[1:] if argv is None else argv)).run()


if __name__ == "__main__":
    main()
