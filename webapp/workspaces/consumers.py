"""The header's "N changes waiting", live: `ws/changes-waiting/`.

connect(): authenticate, join the person's own group, send the count. Each `waiting.moved`
event (a change of theirs moved: created pending, kept, discarded, timed out) makes it read
the count again, for the user this socket signed in as, and send it. The event names nobody's
changes, and a socket only ever joins its own person's group: another user's change can wake
it at worst, never show in its count.
"""

from __future__ import annotations

import logging
from typing import Any

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.runs import publish
from webapp.workspaces.selectors import changes_waiting_summary
from webapp.workspaces.waiting import WaitingMovedEvent, waiting_group

logger = logging.getLogger(__name__)


class WaitingConsumer(AsyncJsonWebsocketConsumer):
    group: str

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
        await self.send_json(await database_sync_to_async(changes_waiting_summary)(user))
