"""The header's "N changes waiting", live: `ws/changes-waiting/`.

connect(): authenticate, join the person's own group, send the count. Each `waiting.moved`
event (a change of theirs moved: created pending, kept, discarded, timed out) makes it read
the count again, for the user this socket signed in as, and send it. The event names nobody's
changes, and a socket only ever joins its own person's group: another user's change can wake
it at worst, never show in its count.

A rest action's pending window ends on the clock, with no write and so no event: each socket
keeps one timer for the earliest such end its count was read with, and reads the count again
just after it (_recount_schedule).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.utils import timezone

from webapp.runs import publish
from webapp.workspaces.selectors import changes_waiting_summary_until
from webapp.workspaces.waiting import WaitingMovedEvent, waiting_group

logger = logging.getLogger(__name__)

# The recount comes this long after the deadline, so the read finds the clock past it (the
# timer runs on the loop's monotonic clock, the deadline is wall time) and a read that still
# counts the thing re-arms no sooner than this: never a busy loop.
RECOUNT_AFTER_DEADLINE_S = 0.5


class WaitingConsumer(AsyncJsonWebsocketConsumer):
    group: str
    _recount: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.group = waiting_group(user.pk)
        publish.bind_consumer_loop()
        # Join first: a change that moves while the count is read is announced after it.
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self._send_count()

    async def disconnect(self, code: int) -> None:
        self._recount_schedule(None)
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # One-way, but a page back from sleep may ask for the count again.
        if isinstance(content, dict) and content.get("type") == "waiting":
            await self._send_count()

    async def waiting_moved(self, event: WaitingMovedEvent) -> None:
        await self._send_count()

    async def _send_count(self) -> None:
        # The session as it is now: a person signed out since connect hears nothing more.
        session = self.scope.get("session")
        if session is None or not await database_sync_to_async(session.exists)(session.session_key):
            await self.close(code=4403)
            return
        user = await get_user(self.scope)
        if not user.is_authenticated:
            await self.close(code=4403)
            return
        summary, ends_at = await database_sync_to_async(changes_waiting_summary_until)(user)
        await self.send_json(summary)
        self._recount_schedule(ends_at)

    def _recount_schedule(self, ends_at: datetime | None) -> None:
        """Read the count again just after `ends_at`, replacing any earlier timer.

        Why a timer here, in the process holding the socket: nothing is written when a rest
        action's pending window ends (its state is read from the clock), so no worker or reaper
        has an event to send, and a scheduled job would have to find every open socket. The
        socket's own timer needs neither, dies with it, and the page's code stays as it is; a
        count read on connect or after any event re-arms it with the then-earliest end."""
        if self._recount is not None:
            self._recount.cancel()
            self._recount = None
        if ends_at is None:
            return
        delay = max(0.0, (ends_at - timezone.now()).total_seconds()) + RECOUNT_AFTER_DEADLINE_S
        self._recount = asyncio.create_task(self._recount_after(delay))

    async def _recount_after(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        # Through the socket's own channel, as the other events come: one handler at a time.
        await self.channel_layer.send(
            self.channel_name, dict(WaitingMovedEvent(type="waiting.moved"))
        )
