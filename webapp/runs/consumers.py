"""Live output of one run over a websocket: `ws/runs/<run_id>/?after=<last seq seen>`.

connect(): authenticate, check the run belongs to the user, join the run's group FIRST, then
replay the stored chunks after `after`, then the current status. Joining first means nothing
published during the replay is lost; anything seen twice is dropped here by seq (and again by the
browser), so the client sees each chunk exactly once, in order.

The channel layer may drop an event (a full channel, a Redis restart). A missing chunk shows
as a gap when the next one arrives and is filled from the database; the final status has no
next event, so a socket that has heard nothing for RECHECK_S re-reads the run itself. Until the
run is final the socket also re-checks every RECHECK_S that its person may still see the run
(still signed in, run not deleted), so access ends within that time, not at the next connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.http import Http404

from webapp.runs import publish
from webapp.runs.models import FINAL_STATUSES, Run
from webapp.runs.payloads import (
    ChangeUpdatedEvent,
    ChunkPayload,
    RunOutputEvent,
    RunStatusEvent,
    run_group,
)
from webapp.runs.selectors import get_run_for_user, run_chunks_after
from webapp.runs.status import status_payload

logger = logging.getLogger(__name__)

REPLAY_BATCH = 500
RECHECK_S = 5.0


class RunConsumer(AsyncJsonWebsocketConsumer):
    run_id: int
    last_sent: int
    group: str
    _watchdog: asyncio.Task[None] | None = None
    _heard_at: float = 0.0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        try:
            run = await database_sync_to_async(get_run_for_user)(
                user, int(self.scope["url_route"]["kwargs"]["run_id"])
            )
        except Http404:
            await self.close(code=4404)
            return
        self.run_id = run.pk
        self.group = run_group(run.pk)
        self.last_sent = _after_from_query_string(self.scope.get("query_string", b""))
        publish.bind_consumer_loop()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self._replay()
        if not await self._send_status():
            self._heard()
            self._watchdog = asyncio.create_task(self._watch())

    async def disconnect(self, code: int) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    def _heard(self) -> None:
        self._heard_at = asyncio.get_running_loop().time()

    async def _watch(self) -> None:
        """Every RECHECK_S until the run is final: close the socket if the person may no
        longer see the run (signed out, run deleted); after a quiet spell, ask the database
        for a final status the channel layer may have dropped."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(RECHECK_S)
            if not await self._still_allowed():
                logger.info("run socket closed: access ended", extra={"run_id": self.run_id})
                await self.close(code=4403)
                return
            if loop.time() - self._heard_at < RECHECK_S:
                continue
            payload = await database_sync_to_async(_current_status)(self.run_id)
            # Only a final status: a live event may have moved the page on meanwhile.
            if payload["status"] in FINAL_STATUSES:
                logger.info("final status found by a quiet socket", extra={"run_id": self.run_id})
                if payload["last_seq"] > self.last_sent:
                    await self._replay()
                await self.send_json(payload)
                return

    async def _still_allowed(self) -> bool:
        # The scope holds the session as loaded at connect: ask the store whether it still
        # exists (a sign-out deletes it), then for its user again (a password change ends it).
        session = self.scope.get("session")
        if session is None or not await database_sync_to_async(session.exists)(session.session_key):
            return False
        user = await get_user(self.scope)
        if not user.is_authenticated:
            return False
        try:
            await database_sync_to_async(get_run_for_user)(user, self.run_id)
        except Http404:
            return False
        return True

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # The socket is one-way; a client may only ask for a fresh status (after a long sleep).
        if isinstance(content, dict) and content.get("type") == "status":
            await self._send_status()

    async def run_output(self, event: RunOutputEvent) -> None:
        self._heard()
        chunk = event["chunk"]
        if chunk["seq"] <= self.last_sent:
            return
        if chunk["seq"] > self.last_sent + 1:
            # A live event went missing (layer capacity, reconnect race): fill from the database.
            await self._replay()
            return
        await self._send_chunk(chunk)

    async def run_status(self, event: RunStatusEvent) -> None:
        self._heard()
        if event["status"]["status"] in FINAL_STATUSES and self._watchdog is not None:
            self._watchdog.cancel()
        if event["status"]["last_seq"] > self.last_sent:
            await self._replay()
        await self.send_json(event["status"])

    async def change_updated(self, event: ChangeUpdatedEvent) -> None:
        # Sent long after the run ended too (Keep, Undo, a timeout), when the watchdog no
        # longer re-checks: ask again whether this person may still see the run.
        if not await self._still_allowed():
            await self.close(code=4403)
            return
        await self.send_json(event["change"])

    async def _send_chunk(self, chunk: ChunkPayload) -> None:
        await self.send_json(chunk)
        self.last_sent = chunk["seq"]

    async def _replay(self) -> None:
        while True:
            chunks = await _chunks_after(self.run_id, self.last_sent)
            for chunk in chunks:
                await self._send_chunk(chunk)
            if len(chunks) < REPLAY_BATCH:
                return

    async def _send_status(self) -> bool:
        """Send the stored status (after any chunk not sent yet); True if it is final."""
        payload = await database_sync_to_async(_current_status)(self.run_id)
        if payload["last_seq"] > self.last_sent:
            await self._replay()
        await self.send_json(payload)
        return payload["status"] in FINAL_STATUSES


@database_sync_to_async
def _chunks_after(run_id: int, after: int) -> list[ChunkPayload]:
    rows = run_chunks_after(run_id, after).values_list("seq", "stream", "text")[:REPLAY_BATCH]
    return [ChunkPayload(type="chunk", seq=s, stream=st, text=t) for s, st, t in rows]


def _current_status(run_id: int) -> Any:
    return status_payload(Run.objects.get(pk=run_id))


def _after_from_query_string(raw: bytes) -> int:
    values = parse_qs(raw.decode("latin-1")).get("after", ["0"])
    try:
        return max(0, int(values[0]))
    except ValueError:
        return 0
