"""Waiting on a run from async code without polling its rows: the events the websockets get.

A run's output, its status changes and its change's moves are published to the run's
channel-layer group (webapp.runs.publish) once they are stored. A waiter joins the groups of
the runs it follows and wakes when one of the event types it cares about arrives, then reads
the rows again: the event says *when* to look, the database stays what is read. An event
lost on the way (a layer that is down, full or restarting) costs at most `safety_s`, the slow
re-read the wait falls back to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from channels.layers import BaseChannelLayer, get_channel_layer

from webapp.runs.payloads import run_group
from webapp.runs.publish import bind_consumer_loop

logger = logging.getLogger(__name__)

# A layer call that takes longer than this is given up: the safety re-read ends the wait.
LAYER_TIMEOUT_S = 2.0

Wake = Callable[[dict[str, Any]], bool]


def any_event(event: dict[str, Any]) -> bool:
    """Every run event: its status, its change, each chunk of output."""
    return True


class RunEvents:
    """Wakes `wait()` when an event `wake` accepts is published for a run `follow()`ed."""

    def __init__(self, layer: BaseChannelLayer | None, wake: Wake) -> None:
        self._layer = layer
        self._wake = wake
        self._arrived = asyncio.Event()
        self._channel: str | None = None
        self._groups: list[str] = []
        self._receiver: asyncio.Task[None] | None = None

    async def follow(self, run_id: int) -> bool:
        """Join run `run_id`'s group: events published from now on wake the waiter. True if it
        joined just now: the caller reads the rows once more then, so that what was stored
        between its last read and the join is not waited for."""
        group = run_group(run_id)
        if self._layer is None or group in self._groups:
            return False
        try:
            if self._channel is None:
                # The in-memory layer's queues belong to one loop: publishers hand events to
                # the loop the listeners run on, this one (as websocket consumers do).
                bind_consumer_loop()
                channel = await asyncio.wait_for(self._layer.new_channel(), LAYER_TIMEOUT_S)
                self._channel = channel
                self._receiver = asyncio.create_task(self._receive(channel))
            await asyncio.wait_for(self._layer.group_add(group, self._channel), LAYER_TIMEOUT_S)
        except Exception as exc:  # no layer: the safety re-read still ends the wait
            logger.warning("run events unavailable", extra={"run_id": run_id, "error": repr(exc)})
            return False
        self._groups.append(group)
        return True

    async def _receive(self, channel: str) -> None:
        assert self._layer is not None
        while True:
            try:
                event = await self._layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the layer went away: the safety re-read takes over
                logger.warning("run events lost", extra={"error": repr(exc)})
                return
            if self._wake(event):
                self._arrived.set()

    async def wait(self, safety_s: float) -> None:
        """Until an event arrives since the last wait, or `safety_s` has passed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._arrived.wait(), safety_s)
        self._arrived.clear()

    async def close(self) -> None:
        """Leave the groups and stop receiving, each given LAYER_TIMEOUT_S at most: the answer
        is ready, and a layer that does not answer must not hold it back."""
        if self._receiver is not None:
            self._receiver.cancel()
            await asyncio.wait({self._receiver}, timeout=LAYER_TIMEOUT_S)
        if self._layer is not None and self._channel is not None:
            for group in self._groups:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        self._layer.group_discard(group, self._channel), LAYER_TIMEOUT_S
                    )


@contextlib.asynccontextmanager
async def run_events(wake: Wake) -> AsyncIterator[RunEvents]:
    """A RunEvents on the default channel layer, left (its groups, its receiver) on exit."""
    events = RunEvents(get_channel_layer(), wake)
    try:
        yield events
    finally:
        await events.close()
