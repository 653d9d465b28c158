"""Live updates of the count of changes waiting for Keep or Discard. One summary
(selectors.changes_waiting_summary) feeds the header of every page, the Review page and the
websocket, so they never disagree. A listener hears only "your count may have moved" and
re-reads its own person's count: an event carries nothing of anyone's changes.
"""

from __future__ import annotations

from typing import Literal, TypedDict

from django.db import transaction

from webapp.runs.publish import publish_group_event


class WaitingPayload(TypedDict):
    """What the header shows: how many changes wait, and where the link goes."""

    type: Literal["waiting"]
    count: int
    url: str


class WaitingMovedEvent(TypedDict):
    """Channel-layer event (handled by WaitingConsumer.waiting_moved): re-read the count."""

    type: Literal["waiting.moved"]


def waiting_group(user_id: int) -> str:
    return f"waiting-{user_id}"


def waiting_publish(*, owner_id: int) -> None:
    """Tell the owner's open pages that their count may have moved, once the write commits."""
    event = WaitingMovedEvent(type="waiting.moved")
    group = waiting_group(owner_id)
    transaction.on_commit(lambda: publish_group_event(group, dict(event)))
