"""A server that stops the way a client can rely on: what it can finish in its grace period it
finishes, and everything else ends with a reason.

uvicorn's own shutdown waits for requests in flight, then cancels the ones left ("Cancel N
running task(s)"): their clients get a 500 or a closed connection, and the runs they started go
on in their threads. Here, on SIGTERM or SIGINT:

1. No new connection; idle ones close; websockets close with 1012 (service restart).
2. Requests in flight and the web runs (queued ones too) get UNDOABLE_SHUTDOWN_GRACE_S less
   END_S to end by themselves.
3. Then the runs still going end with webapp.stopping.SERVER_STOPPED: web runs `failed` with it
   (webapp.runs.services.runs_stop_all), an agent's exec by the 503 its request answers (one
   whose client went away is ended too).
4. A request still unanswered END_S / 2 later is cut by AnswersWhenStopped: its client gets
   503 with that reason, never a connection closed with no answer.
5. The agents' sessions and the executor's backend close: their sandboxes and cgroups go
   with the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn
from django.apps import apps
from django.conf import settings

from webapp.stopping import SERVER_STOPPED, runs_end

logger = logging.getLogger("webapp.server.serve")

# The part of the grace period kept for ending what is left: killing sandboxes, recording runs,
# answering 503.
END_S = 1.5
_POLL_S = 0.05

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class AnswersWhenStopped:
    """ASGI middleware: a request cut by a stopping server answers 503, and is no error.

    Only DrainingServer cuts requests (it cancels their tasks), and only after setting
    `cutting`; any other cancellation propagates as usual.
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self.cutting = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = cut = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            if cut:
                # Django's handler runs the view in a task of its own, which the cut does not
                # cancel: what it answers later (a session cell ended by the closing session)
                # comes after our 503, and goes nowhere.
                return
            if message["type"] in ("http.response.start", "websocket.accept", "websocket.close"):
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except asyncio.CancelledError:
            if not self.cutting:
                raise
            cut = True
            answered = scope["type"] == "http" and not started
            if answered:
                await send_stopped(send)
            logger.info(
                "request cut by the server stopping",
                extra={"path": scope.get("path"), "answered_503": answered},
            )


async def send_stopped(send: Send) -> None:
    body = json.dumps({"error": SERVER_STOPPED}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"5"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _runs_stop(*, grace_s: float) -> bool:
    """The web runs this process executes end within `grace_s`, or with SERVER_STOPPED."""
    if not apps.ready:  # serving another application than the product's: it has no runs
        return True
    from webapp.runs.services import runs_stop_all

    return runs_stop_all(reason=SERVER_STOPPED, grace_s=grace_s, timeout_s=END_S)


def _backend_close() -> None:
    """What the server still holds goes with it: its agents' sessions (their sandboxes), then
    the backend (the stateless sandboxes, the cgroups)."""
    if not apps.ready:
        return
    from webapp.agents.session_services import reset_session_manager
    from webapp.executor_glue import executor_close

    for close in (reset_session_manager, executor_close):
        try:
            close()
        except Exception:
            logger.exception("closing what the server holds failed", extra={"step": close.__name__})


class DrainingServer(uvicorn.Server):
    """uvicorn's Server with the shutdown above."""

    app: AnswersWhenStopped | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.app = AnswersWhenStopped(self.config.loaded_app)
        self.config.loaded_app = self.app
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        grace_s = float(settings.UNDOABLE_SHUTDOWN_GRACE_S)
        drain_s = max(0.0, grace_s - END_S)
        logger.info("stopping: finishing requests and runs", extra={"grace_s": grace_s})
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        # The web runs on their own thread: they may outlast the requests, which only queue them.
        runs = asyncio.ensure_future(asyncio.to_thread(_runs_stop, grace_s=drain_s))
        answered = await self._requests_done(loop.time() + drain_s)
        # The execs still running: each one in flight answers 503 as its sandbox dies, and one
        # whose client went away (its thread runs on) is killed here, not left to the kernel.
        runs_end()
        if not answered and not await self._requests_done(loop.time() + END_S / 2):
            self._cut()
            await self._requests_done(loop.time() + END_S / 2)
        if not await runs:
            logger.warning("runs still executing at the end of the grace period")
        await asyncio.to_thread(_backend_close)
        for server in self.servers:
            await server.wait_closed()

    async def _requests_done(self, until: float) -> bool:
        """Wait until no connection or task is left, or `until` (loop time); True if none is."""
        loop = asyncio.get_running_loop()
        while self.server_state.connections or self.server_state.tasks:
            if self.force_exit or loop.time() >= until:
                return False
            await asyncio.sleep(_POLL_S)
        return True

    def _cut(self) -> None:
        tasks = list(self.server_state.tasks)
        logger.warning(
            "requests unfinished at the end of the grace period answer 503",
            extra={"requests": len(tasks)},
        )
        if self.app is not None:
            self.app.cutting = True
        for task in tasks:
            task.cancel()
