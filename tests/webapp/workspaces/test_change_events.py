"""`change.updated` on the run's websocket (real ASGI app, real runner and sandbox): the page
hears when its change awaits a choice and when it was kept, without polling."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session

from tests.factories import QueryFactory, UserFactory
from tests.webapp.runs.test_run_consumer import ORIGIN, TIMEOUT, session_cookie
from tests.webapp.runs.waiting import wait_until
from webapp.asgi import application
from webapp.runs import services
from webapp.workspaces import services as ws
from webapp.workspaces.models import ChangeStatus, PendingChange

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")


@pytest.fixture
def awaiting_keep() -> PendingChange:
    owner = UserFactory()
    query = QueryFactory(owner=owner, kind="fs", forward_code="open('a.txt','w').write('a')\n")
    run = services.query_run(query=query)
    wait_until(
        lambda: PendingChange.objects.filter(run=run, status=ChangeStatus.PENDING).exists(),
        timeout=60,
        what="the fs change to await a choice",
    )
    return PendingChange.objects.select_related("run__query__owner").get(run=run)


async def run_socket(change: PendingChange) -> WebsocketCommunicator:
    headers = [
        (b"origin", ORIGIN),
        (b"host", b"127.0.0.1:8000"),
        (b"cookie", await session_cookie(change.run.query.owner)),
    ]
    communicator = WebsocketCommunicator(application, f"/ws/runs/{change.run_id}/", headers)
    connected, _ = await communicator.connect(timeout=TIMEOUT)
    assert connected
    return communicator


async def next_change(communicator: WebsocketCommunicator) -> dict[str, Any]:
    """The next `change` message (the replay and status sent on connect come first)."""
    while True:
        message = await communicator.receive_json_from(timeout=TIMEOUT)
        if message["type"] == "change":
            return message


async def test_keeping_a_change_publishes_change_updated_to_the_run_group(awaiting_keep) -> None:
    communicator = await run_socket(awaiting_keep)
    await database_sync_to_async(ws.change_keep)(change=awaiting_keep)
    message = await next_change(communicator)
    assert message == {
        "type": "change",
        "change_id": awaiting_keep.pk,
        "run_id": awaiting_keep.run_id,
        "status": "kept",
        "message": "Applied to the workspace.",
    }
    await communicator.disconnect()


async def test_a_signed_out_watcher_gets_no_change_event(awaiting_keep) -> None:
    communicator = await run_socket(awaiting_keep)
    await database_sync_to_async(_sign_everyone_out)()
    await database_sync_to_async(ws.change_discard)(change=awaiting_keep)
    while (output := await communicator.receive_output(timeout=TIMEOUT))["type"] != (
        "websocket.close"
    ):
        assert '"type": "change"' not in output.get("text", "")
    assert output["code"] == 4403


def _sign_everyone_out() -> None:
    Session.objects.all().delete()
