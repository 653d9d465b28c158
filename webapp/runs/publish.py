"""The one helper sync code uses to send run events to websocket consumers.

Channel-layer coroutines must run on one event loop:
- the in-memory layer (embedded mode) keeps asyncio queues that belong to the loop the consumers
  run on, and asyncio queues are not thread-safe. Worker threads therefore hand the send to that
  loop (`bind_consumer_loop()` is called by the consumer on connect).
- channels_redis keeps its connection pool per loop; a fresh loop per chunk (plain
  `async_to_sync`) would open a connection per chunk. A long-lived publisher loop thread in each
  process (re-created after a fork, e.g. in Celery prefork children) keeps one pool.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer

from webapp.runs.payloads import (
    ChangeUpdatedEvent,
    RunOutputEvent,
    RunStatusEvent,
    run_group,
)

logger = logging.getLogger(__name__)

_SEND_TIMEOUT_S = 5.0
_lock = threading.Lock()
_consumer_loop: asyncio.AbstractEventLoop | None = None
_own_loop: asyncio.AbstractEventLoop | None = None
_own_loop_pid: int | None = None


def bind_consumer_loop() -> None:
    """Remember the running loop that websocket consumers live on (call from async code)."""
    global _consumer_loop
    _consumer_loop = asyncio.get_running_loop()


def _publisher_loop() -> asyncio.AbstractEventLoop:
    global _own_loop, _own_loop_pid
    with _lock:
        if _own_loop is None or _own_loop_pid != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="run-event-publisher", daemon=True
            )
            thread.start()
            _own_loop, _own_loop_pid = loop, os.getpid()
        return _own_loop


def _target_loop() -> asyncio.AbstractEventLoop:
    layer = get_channel_layer()
    loop = _consumer_loop
    if isinstance(layer, InMemoryChannelLayer) and loop is not None and loop.is_running():
        return loop
    return _publisher_loop()


def publish_run_event(
    run_id: int, event: RunOutputEvent | RunStatusEvent | ChangeUpdatedEvent
) -> None:
    """Send `event` to everyone watching run `run_id`. Never raises: output is already stored,
    and a client that missed an event gets it from the replay when it reconnects (the page
    fetches its change panel again then)."""
    publish_group_event(run_group(run_id), dict(event), log_extra={"run_id": run_id})


def publish_group_event(
    group: str, event: dict[str, Any], *, log_extra: dict[str, Any] | None = None
) -> None:
    """Send `event` to a channel-layer group from sync or async code, on the right loop.
    Never raises: what the event announces is already stored, and its listeners re-read it."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _target_loop()
    try:
        running_here = asyncio.get_running_loop() is loop
    except RuntimeError:
        running_here = False
    if running_here:
        # Called from the loop itself (an async caller): schedule without blocking it.
        loop.create_task(layer.group_send(group, event))
        return
    future = asyncio.run_coroutine_threadsafe(layer.group_send(group, event), loop)
    extra = log_extra or {"group": group}
    try:
        future.result(timeout=_SEND_TIMEOUT_S)
    except FutureTimeout:
        future.cancel()
        logger.warning("event publish timed out", extra=extra)
    except Exception as exc:  # a layer failure must not kill the run; replay covers the gap
        logger.warning("event publish failed", extra={**extra, "error": repr(exc)})
