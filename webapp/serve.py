"""`python -m webapp.serve [daphne's options] [application]`: the app under daphne, with what
daphne lacks in front of it: a deadline for each request head and a cap on open connections.

`make run`, the Docker image, docker-compose.yml and the tests' live servers all start the web
server through here, so they run with the same limits. An idle connection holds a descriptor;
these limits, and the open-files limit webapp.asgi raises, keep descriptors for the sandboxes.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# daphne.cli imports daphne.server, which installs the asyncio reactor: before any Twisted import
# that could install the default one.
from daphne.cli import CommandLineInterface
from daphne.server import Server
from twisted.internet.base import DelayedCall
from twisted.internet.interfaces import IAddress
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.python.failure import Failure
from twisted.web import http

from webapp.reliability.management.commands.migrate import var_dir_setup

logger = logging.getLogger("webapp.serve")  # also when run as __main__

APPLICATION = "webapp.asgi:application"
HEAD_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 20.0
MAX_CONNECTIONS = 4096
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
# Twisted listens with a backlog of 50: a burst of more new connections than that loses the
# excess handshakes, and their clients wait for retransmissions.
LISTEN_BACKLOG = 2048
# Descriptors the cap leaves for what requests open: sandboxes' pipes, the database, Redis, logs.
RESERVED_FDS = 512


class HeadDeadlineChannel(http.HTTPChannel):
    """Twisted's HTTP/1.1 channel with a deadline for each request head.

    Twisted's own idle timeout restarts with every byte received, so a client that never
    finishes its head, sending a byte now and then, holds its connection for good. Here the
    first head must be complete `head_timeout_s` after the connection opened, and each later
    one `keepalive_timeout_s` after the previous response, each deadline at a random point of
    the second half of that time (HEAD_DEADLINE_SPREAD). While a request is being answered, and
    once a connection became a websocket, no deadline runs.
    """

    def __init__(self, head_timeout_s: float | None, keepalive_timeout_s: float | None) -> None:
        super().__init__()
        self.head_timeout_s = head_timeout_s
        self.keepalive_timeout_s = keepalive_timeout_s
        self._head_deadline: DelayedCall | None = None
        self.requestFactory = http.Request

    # Twisted parses a POST's form upload into `request.args`, which neither daphne nor Django
    # reads: Django parses the body itself. Off, a POST does not pay for Twisted's Content-Type
    # parse through the `email` package (~7% of the event loop's time per API request), a
    # multipart body is not parsed twice, and a malformed one gets the app's own answer.
    @property  # type: ignore[override]
    def requestFactory(self) -> Callable[..., http.Request]:
        return self._request_factory

    @requestFactory.setter
    def requestFactory(self, factory: Callable[..., http.Request]) -> None:  # daphne sets it
        self._request_factory = functools.partial(factory, parsePOSTFormSubmission=False)

    def connectionMade(self) -> None:
        super().connectionMade()
        self._head_deadline_set(self.head_timeout_s)

    def allHeadersReceived(self) -> None:
        self._head_deadline_set(None)
        super().allHeadersReceived()

    def requestDone(self, request: http.Request) -> None:
        if self.persistent:
            # Set before the base class parses a pipelined next request, whose head clears it.
            self._head_deadline_set(self.keepalive_timeout_s)
        super().requestDone(request)

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        self._head_deadline_set(None)
        super().connectionLost(reason)

    def _head_deadline_set(self, timeout_s: float | None) -> None:
        if self._head_deadline is not None and self._head_deadline.active():
            self._head_deadline.cancel()
        self._head_deadline = None
        if timeout_s is not None:
            spread = random.uniform(1.0 - HEAD_DEADLINE_SPREAD, 1.0)  # noqa: S311 (not a secret)
            self._head_deadline = self.callLater(timeout_s * spread, self._head_late)

    def _head_late(self) -> None:
        self._head_deadline = None
        self.timeoutConnection()  # Twisted's own: close, and abort if closing does not finish


class CappedFactory(WrappingFactory):
    """At most `limit` connections open at once. A connection past it is closed as soon as it is
    accepted: the client learns at once, and the server keeps its descriptors."""

    def __init__(self, wrapped: http.HTTPFactory, limit: int | None) -> None:
        super().__init__(wrapped)
        self.limit = limit

    # None is how a Twisted factory refuses a connection, which WrappingFactory's type leaves out.
    def buildProtocol(self, addr: IAddress | None) -> ProtocolWrapper | None:  # type: ignore[override]
        if self.limit is not None and len(self.protocols) >= self.limit:
            return None  # the listening port closes the accepted socket
        return super().buildProtocol(addr)


@dataclass(frozen=True)
class ConnectionLimits:
    """The timeouts in seconds, None for none; the cap as asked for (see connection_cap)."""

    head_timeout_s: float | None
    idle_timeout_s: float | None
    max_connections: int | None

    def wrap(self, factory: http.HTTPFactory) -> CappedFactory:
        # Twisted's idle timeout (restarted by every byte) still covers a slow request body.
        factory.timeOut = self.idle_timeout_s
        # The channel itself rather than Twisted's wrapper that can switch to HTTP/2: that needs
        # TLS, which this server does not terminate.
        factory.protocol = functools.partial(  # type: ignore[method-assign, assignment]
            HeadDeadlineChannel, self.head_timeout_s, self.idle_timeout_s
        )
        cap = connection_cap(self.max_connections)
        logger.info(
            "connection limits",
            extra={
                "head_timeout_s": self.head_timeout_s,
                "idle_timeout_s": self.idle_timeout_s,
                "max_connections": cap,
            },
        )
        return CappedFactory(factory, cap)


def connection_cap(requested: int | None) -> int | None:
    """The cap asked for (0: none), or by default one that leaves RESERVED_FDS descriptors free
    under the open-files limit the process has when it starts listening (importing webapp.asgi
    raised it)."""
    if requested is not None:
        return requested or None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(1, min(MAX_CONNECTIONS, soft - RESERVED_FDS))


class LimitedServer(Server):
    """daphne's Server with its HTTP factory wrapped in the limits. Server.run() makes the
    factory and listens with it in one method, so the wrapping happens as run() assigns it."""

    def __init__(self, *args: Any, limits: ConnectionLimits, endpoints: list[str], **kwargs: Any):
        self.limits = limits
        super().__init__(*args, endpoints=[_with_backlog(e) for e in endpoints], **kwargs)

    @property
    def http_factory(self) -> CappedFactory:
        return self._capped_factory

    @http_factory.setter
    def http_factory(self, factory: http.HTTPFactory) -> None:
        self._capped_factory = self.limits.wrap(factory)


def _with_backlog(endpoint: str) -> str:
    """A Twisted server endpoint description, a TCP one given LISTEN_BACKLOG unless it names one."""
    options = endpoint.split(":")
    if options[0] != "tcp" or any(o.startswith("backlog=") for o in options):
        return endpoint
    return f"{endpoint}:backlog={LISTEN_BACKLOG}"


def _off_if_zero(value: float) -> float | None:
    return value or None


class ServeCommand(CommandLineInterface):
    """daphne's command line, plus the limits, and the application defaulting to this one."""

    def __init__(self) -> None:
        super().__init__()
        (application,) = (a for a in self.parser._actions if a.dest == "application")
        application.nargs, application.required, application.default = "?", False, APPLICATION
        group = self.parser.add_argument_group("connection limits (webapp.serve; 0 turns one off)")
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
            "after its last response (default %(default)s)",
        )
        group.add_argument(
            "--max-connections",
            type=int,
            default=None,
            help=f"refuse connections past this many open at once (default: {MAX_CONNECTIONS}, "
            f"or the open-files limit less {RESERVED_FDS} if that is lower)",
        )

    def run(self, args: list[str]) -> None:
        options = self.parser.parse_args(args)
        self.server_class = functools.partial(
            LimitedServer,
            limits=ConnectionLimits(
                head_timeout_s=_off_if_zero(options.head_timeout_s),
                idle_timeout_s=_off_if_zero(options.idle_timeout_s),
                max_connections=options.max_connections,
            ),
        )
        super().run(args)


def main(argv: list[str] | None = None) -> None:
    # The state folders, as `manage.py migrate` sets them up: a web container runs no migrate.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    var_dir_setup()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    ServeCommand().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
