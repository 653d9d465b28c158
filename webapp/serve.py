"""`python -m webapp.serve [-b HOST] [-p PORT] [--proxy-headers] [limits] [application]`: the app
under uvicorn (httptools, uvloop), with what uvicorn lacks in front of it: a deadline for each
request head, a cap on its size, an idle deadline for a request body, and a cap on open
connections that closes the excess at once.

`make run`, the Docker image, docker-compose.yml and the tests' live servers all start the web
server through here, so they run with the same limits. An idle connection holds a descriptor;
these limits, and the open-files limit webapp.asgi raises, keep descriptors for the sandboxes.
uvicorn rather than daphne: less of the server's CPU per API request, and the way to a thinner
path for it (docs/benchmarks.md, "uvicorn instead of daphne").
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import random
import resource
import sys
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from webapp.draining import DrainingServer
from webapp.reliability.management.commands.migrate import var_dir_setup

logger = logging.getLogger("webapp.serve")  # also when run as __main__

APPLICATION = "webapp.asgi:application"
HEAD_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 20.0
MAX_CONNECTIONS = 4096
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


class LimitedConfig(uvicorn.Config):
    """uvicorn's Config, carrying the limits to each connection's protocol."""

    def __init__(self, app: str, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        self.limits = limits
        self.connection_cap: int | None = None
        super().__init__(app, http=LimitedHttpProtocol, **kwargs)

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
            },
        )


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with the limits.

    uvicorn's own keep-alive timeout is cancelled by the first byte received, so a client that
    never finishes its head, sending a byte now and then, would hold its connection for good.
    Here the first head must be complete `head_timeout_s` after the connection opened, and each
    later one `idle_timeout_s` after the previous response, each deadline at a random point of
    the second half of that time (HEAD_DEADLINE_SPREAD). A request body must keep coming: each
    byte of it restarts an `idle_timeout_s` deadline. While a request is being answered, and once
    a connection became a websocket, no deadline runs.
    """

    def __init__(self, config: LimitedConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)  # type: ignore[arg-type]
        self.limits = config.limits
        self.connection_cap = config.connection_cap
        self._deadline: asyncio.TimerHandle | None = None
        self._head_bytes: int | None = 0  # None once the head is complete
        self._reading_body = False
        self._message_completed = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.connection_cap is not None and len(self.connections) > self.connection_cap:
            transport.close()  # the client learns at once, and the server keeps its descriptors
            return
        self._head_deadline_set(self.limits.head_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._reading_body:
            self._deadline_set(self.limits.idle_timeout_s)  # restarted by every byte of a body
        self._message_completed = False
        super().data_received(data)
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
        self._deadline_set(self.limits.idle_timeout_s)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._reading_body = False
        self._message_completed = True
        self._deadline_cancel()
        answered_early = self.cycle is not None and self.cycle.response_complete
        super().on_message_complete()
        if answered_early and not self.transport.is_closing():
            self._next_head_await()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # uvicorn armed its keep-alive timer: no pipelined request was started. The connection
        # waits for its next head, unless the app answered before the body was all sent (a 413
        # for a body declared too large): the rest of the body comes first, and uvicorn drops it.
        if self.timeout_keep_alive_task is not None and not self._reading_body:
            self._next_head_await()

    def _next_head_await(self) -> None:
        self._head_bytes = 0
        self._head_deadline_set(self.limits.idle_timeout_s)

    def handle_websocket_upgrade(self) -> None:
        self._reading_body = False
        self._deadline_cancel()
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline_cancel()
        super().connection_lost(exc)

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
    parser = argparse.ArgumentParser(prog="python -m webapp.serve", description=__doc__)
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
    return parser


def config_from(argv: list[str]) -> LimitedConfig:
    options = parser().parse_args(argv)
    limits = ConnectionLimits(
        head_timeout_s=_off_if_zero(options.head_timeout_s),
        idle_timeout_s=_off_if_zero(options.idle_timeout_s),
        max_connections=options.max_connections,
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
        lifespan="off",  # Django has no lifespan events
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
