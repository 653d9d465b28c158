"""Live updates of the count of changes waiting for Keep or Discard. One summary
(selectors.changes_waiting_summary) feeds the header of every page, the Review page and the
websocket, so they never disagree. A listener hears only "your count may have moved" and
re-reads its own person's count: an event carries nothing of anyone's changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypedDict

from django.contrib.auth.models import User
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


@dataclass(frozen=True)
class Waiting:
    """Things of one kind waiting for their owner's decision: each one's page (oldest first),
    the page that lists them all, and when the first of them stops waiting by itself with
    nothing written (a rest action's pending timeout, read from the clock), if one does."""

    urls: list[str]
    list_url: str
    ends_at: datetime | None = None


# Other apps' things that wait for their owner as a change does (a rest action whose effect
# stands until Keep or Undo: webapp.actions), added in their AppConfig.ready: this app cannot
# import them, they import it.
_sources: list[Callable[[User], Waiting]] = []


def waiting_source_add(source: Callable[[User], Waiting]) -> None:
    if source not in _sources:
        _sources.append(source)


def waiting_from_sources(user: User) -> list[Waiting]:
    return [source(user) for source in _sources]


def waiting_group(user_id: int) -> str:
    return f"waiting-{user_id}"


def waiting_publish(*, owner_id: int) -> None:
    """Tell the owner's open pages that their count may have moved, once the write commits."""
    event = WaitingMovedEvent(type="waiting.moved")
    group = waiting_group(owner_id)
    transaction.on_commit(lambda: publish_group_event(group, dict(event)))
