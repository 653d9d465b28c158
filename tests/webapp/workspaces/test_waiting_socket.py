"""`ws/changes-waiting/` (real ASGI app and channel layer): the header's count of changes
waiting arrives when the page opens and again, without a reload, each time one of the person's
changes moves. It is always the person's own count: another user's waiting change never shows
in it; with the socket counting everyone's changes (sabotage), it does."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.urls import reverse

from tests.factories import QueryFactory, RunFactory, UserFactory
from tests.webapp.runs.test_run_consumer import ORIGIN, TIMEOUT, session_cookie
from webapp.asgi import application
from webapp.workspaces import selectors
from webapp.workspaces.models import ChangeStatus, PendingChange
from webapp.workspaces.services import change_set

pytestmark = pytest.mark.django_db(transaction=True)


async def waiting_socket(user: Any) -> WebsocketCommunicator:
    headers = [(b"origin", ORIGIN), (b"host", b"127.0.0.1:8000")]
    if user is not None:
        headers.append((b"cookie", await session_cookie(user)))
    communicator = WebsocketCommunicator(application, "/ws/changes-waiting/", headers)
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    assert connected
    return communicator


@database_sync_to_async
def change_goes_pending(owner: Any, prompt: str) -> PendingChange:
    """An fs run's change settling as pending, through the service the runner calls."""
    query = QueryFactory(owner=owner, kind="fs", prompt=prompt)
    change = PendingChange.objects.create(run=RunFactory(query=query), kind="fs")
    change_set(change, ChangeStatus.PENDING, "")
    return change


async def test_the_count_comes_on_connect_and_again_when_a_change_of_mine_waits() -> None:
    owner = await database_sync_to_async(UserFactory)()
    communicator = await waiting_socket(owner)
    assert await communicator.receive_json_from(timeout=TIMEOUT) == {
        "type": "waiting",
        "count": 0,
        "url": reverse("history:list") + "?waiting=1",
    }
    change = await change_goes_pending(owner, "mine")
    message = await communicator.receive_json_from(timeout=TIMEOUT)
    detail = reverse("queries:query-detail", args=[change.run.query_id])
    assert message == {"type": "waiting", "count": 1, "url": f"{detail}#pending-change"}
    await database_sync_to_async(change_set)(change, ChangeStatus.DISCARDED, "discarded")
    assert (await communicator.receive_json_from(timeout=TIMEOUT))["count"] == 0
    await communicator.disconnect()


async def test_deny_another_users_waiting_change_never_shows_in_my_count() -> None:
    owner, stranger = await database_sync_to_async(lambda: (UserFactory(), UserFactory()))()
    communicator = await waiting_socket(owner)
    assert (await communicator.receive_json_from(timeout=TIMEOUT))["count"] == 0
    await change_goes_pending(stranger, "theirs")
    await change_goes_pending(owner, "mine")
    # The next message is my change's: the stranger's woke nothing here, and counts nowhere.
    assert (await communicator.receive_json_from(timeout=TIMEOUT))["count"] == 1
    await communicator.disconnect()


@pytest.mark.sabotage
async def test_sabotage_counting_everyones_changes_shows_another_users_in_my_count(
    monkeypatch,
) -> None:
    def everyone(user: Any) -> list[PendingChange]:
        return list(PendingChange.objects.filter(status=ChangeStatus.PENDING).select_related("run"))

    monkeypatch.setattr(selectors, "changes_waiting_for_user", everyone)
    owner, stranger = await database_sync_to_async(lambda: (UserFactory(), UserFactory()))()
    communicator = await waiting_socket(owner)
    assert (await communicator.receive_json_from(timeout=TIMEOUT))["count"] == 0
    await change_goes_pending(stranger, "theirs")
    await change_goes_pending(owner, "mine")
    assert (await communicator.receive_json_from(timeout=TIMEOUT))["count"] == 2
    await communicator.disconnect()


async def test_a_visitor_is_refused() -> None:
    communicator = WebsocketCommunicator(
        application, "/ws/changes-waiting/", [(b"origin", ORIGIN), (b"host", b"127.0.0.1:8000")]
    )
    connected, code = await communicator.connect(timeout=TIMEOUT)
    assert (connected, code) == (False, 4401)
