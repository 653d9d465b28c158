"""Django's ASGI handler, with requests that their reference counts free.

Django 5.2's handler watches for the client's disconnect in a task of its own beside the view.
The server says `http.disconnect` once the response is sent, so the watcher of nearly every
request ended by raising RequestAborted. The handler catches it through `task.result()`, and
the exception's traceback then holds the handler's frame, whose `tasks` hold the watcher's task,
which holds the exception: a cycle that kept the whole request (the request object, its body,
its response, its tasks and contexts, ~80 objects) alive until the cycle collector's next pass.
Under a flood of requests those passes came every ~100 ms and each walked thousands of such
objects, on the event loop every other request waits on (docs/benchmarks.md, "Requests freed
by their reference counts").

Here the watcher returns on a disconnect instead of raising. Django 5.2's `handle()` treats the
two alike: whichever task completes first, the other is cancelled, and the watcher's result is
otherwise ignored. tests/webapp/test_asgi_handler.py holds a client's disconnect to still
cancelling the view, should a Django upgrade change that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.core.handlers.asgi import ASGIHandler


class AcyclicASGIHandler(ASGIHandler):
    async def listen_for_disconnect(
        self, receive: Callable[[], Awaitable[Mapping[str, Any]]]
    ) -> None:
        message = await receive()
        if message["type"] != "http.disconnect":
            # As Django's own: a server that sends anything else after the body is broken.
            raise AssertionError(f"Invalid ASGI message after request body: {message['type']}")
