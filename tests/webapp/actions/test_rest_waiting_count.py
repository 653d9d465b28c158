"""A pending rest action (its effect stands, waiting for Keep or Undo) is one of the things
waiting in the one count: the header, the Review page and the `ws/changes-waiting/` socket,
which moves without a reload when one starts waiting, is kept, or reaches its timeout."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from tests.webapp.runs.test_run_consumer import TIMEOUT
from tests.webapp.workspaces.test_waiting_socket import waiting_socket
from webapp.workspaces.selectors import changes_waiting_summary

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

REST = {
    "kind": "rest",
    "intent": "post the joke to the team channel",
    "forward_code": "print('ts=1700000000.000100')",
    "reverse_code": "print('deleted')",
}
FS = {"kind": "fs", "forward_code": "open('joke.txt', 'w').write('knock knock')"}


def test_a_pending_rest_action_is_counted_in_the_header_and_on_the_review_page(owner):
    action = owner.post("/api/v1/actions", REST).json()
    assert action["status"] == "pending"
    review = reverse("actions:review")
    assert changes_waiting_summary(owner.user) == {
        "type": "waiting",
        "count": 1,
        "url": f"{review}#action-{action['id']}",
    }
    owner.client.force_login(owner.user)
    page = owner.client.get(review).content.decode()
    assert "<span data-review-waiting>1</span>" in page
    assert owner.post("/api/v1/actions", FS).json()["status"] == "pending"
    assert changes_waiting_summary(owner.user)["count"] == 2
    assert changes_waiting_summary(owner.user)["url"] == review  # lists both kinds
    owner.post(f"/api/v1/actions/{action['id']}/keep", {})
    assert changes_waiting_summary(owner.user)["count"] == 1


def test_a_rest_action_undone_or_past_its_timeout_no_longer_waits(owner, settings):
    action = owner.post("/api/v1/actions", REST).json()
    undone = owner.post(f"/api/v1/actions/{action['id']}/undo", {"credentials": {}}).json()
    assert undone["status"] == "reversed"
    assert changes_waiting_summary(owner.user)["count"] == 0
    owner.post("/api/v1/actions", REST)
    settings.UNDOABLE_REST_PENDING_TIMEOUT_S = 0
    assert changes_waiting_summary(owner.user)["count"] == 0


def test_deny_another_users_pending_rest_action_is_not_in_my_count(owner, stranger):
    stranger.post("/api/v1/actions", REST)
    assert changes_waiting_summary(owner.user)["count"] == 0


async def test_the_socket_counts_it_and_moves_when_it_is_kept(owner):
    action = (await sync_to_async(owner.post)("/api/v1/actions", REST)).json()
    communicator = await waiting_socket(owner.user)
    first = await communicator.receive_json_from(timeout=TIMEOUT)
    assert first["count"] == 1
    await sync_to_async(owner.post)(f"/api/v1/actions/{action['id']}/keep", {})
    assert (await communicator.receive_json_from(timeout=TIMEOUT))["count"] == 0
    await communicator.disconnect()


async def test_the_socket_hears_a_token_rest_action_start_waiting_and_reach_its_timeout(
    owner, settings
):
    # Long enough for the count read after the run ends to find it waiting; nothing is timed:
    # the drop arrives by itself (no request, no reload) within the receive's own timeout.
    settings.UNDOABLE_REST_PENDING_TIMEOUT_S = 10
    communicator = await waiting_socket(owner.user)
    assert (await communicator.receive_json_from(timeout=TIMEOUT))["count"] == 0
    action = (await sync_to_async(owner.post)("/api/v1/actions", REST)).json()
    assert action["status"] == "pending"
    review = reverse("actions:review")
    assert await communicator.receive_json_from(timeout=TIMEOUT) == {
        "type": "waiting",
        "count": 1,
        "url": f"{review}#action-{action['id']}",
    }
    assert (await communicator.receive_json_from(timeout=TIMEOUT))["count"] == 0
    assert (await sync_to_async(owner.get)(f"/api/v1/actions/{action['id']}")).json()[
        "status"
    ] == "expired"
    await communicator.disconnect()
