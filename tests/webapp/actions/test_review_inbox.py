"""The Review page lists the actions the owner's tokens made (pending first) with what a
reviewer needs, and the owner's Keep there applies a review-required token's change. Another
user's actions never appear in the inbox or its count; with the owner filter switched off
(sabotage) they do."""

from __future__ import annotations

import pytest
from django.urls import reverse

from webapp.actions import selectors, views
from webapp.actions.limits import Limits, token_limits_set
from webapp.actions.models import Action
from webapp.agents.models import ApiToken
from webapp.queries.models import Query
from webapp.workspaces.models import PendingChange, Workspace

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

FS = {
    "kind": "fs",
    "intent": "tell a joke in joke.txt",
    "forward_code": "open('joke.txt', 'w').write('knock knock')\nprint('wrote it')",
    "reverse_code": "import os\nos.remove('joke.txt')",
}
PY = {"kind": "python", "intent": "say hello", "forward_code": "print('hello')"}


def review_page(persona) -> str:
    persona.client.force_login(persona.user)
    return persona.client.get(reverse("actions:review")).content.decode()


def items(page: str) -> list[str]:
    """The ids of the listed actions, in page order."""
    return [part.split('"', 1)[0] for part in page.split('data-action-id="')[1:]]


def review_required(persona) -> None:
    token_limits_set(
        token=ApiToken.objects.get(owner=persona.user),
        limits=Limits(
            allowed_kinds=[],
            allowed_hosts=[],
            allowed_db_targets=[],
            actions_per_hour=None,
            pending_at_once=None,
            review_required=True,
        ),
    )


def test_it_lists_the_owners_agent_actions_pending_first_with_what_a_reviewer_needs(owner):
    done = owner.post("/api/v1/actions", PY).json()
    pending = owner.post("/api/v1/actions", FS).json()
    assert (done["status"], pending["status"]) == ("succeeded", "pending")
    page = review_page(owner)
    assert items(page) == [str(pending["id"]), str(done["id"])]
    for shown in ("tell a joke in joke.txt", "token <strong>test</strong>", "wrote it"):
        assert shown in page
    assert "open(&#x27;joke.txt&#x27;, &#x27;w&#x27;)" in page  # the forward program
    assert "os.remove(&#x27;joke.txt&#x27;)" in page  # the reverse program
    assert 'data-path="joke.txt"' in page  # the change list
    change = PendingChange.objects.get(run__query_id=pending["id"])
    assert reverse("workspaces:change-keep", args=[change.pk]) in page
    assert "<span data-review-waiting>1</span> change waiting" in page
    assert "<span data-changes-waiting-count>1</span> change waiting" in page  # the header's


def test_the_owners_keep_on_the_review_page_applies_a_review_required_change(owner):
    review_required(owner)
    action = owner.post("/api/v1/actions", FS).json()
    refused = owner.post(f"/api/v1/actions/{action['id']}/keep", {})
    assert refused.status_code == 403
    assert f"/review/#action-{action['id']}" in refused.json()["error"]
    review_page(owner)
    change = PendingChange.objects.get(run__query_id=action["id"])
    kept = owner.client.post(
        reverse("workspaces:change-keep", args=[change.pk]), {"back": "review"}
    )
    assert kept.status_code == 302 and kept["Location"] == reverse("actions:review")
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "kept"
    root = Workspace.objects.get(pk=action["workspace"]).root
    assert (root / "joke.txt").read_text() == "knock knock"


def test_a_plain_keep_goes_back_only_to_a_named_page_never_to_a_url_it_was_given(owner):
    action = owner.post("/api/v1/actions", FS).json()
    owner.client.force_login(owner.user)
    change = PendingChange.objects.get(run__query_id=action["id"])
    kept = owner.client.post(
        reverse("workspaces:change-keep", args=[change.pk]), {"back": "https://evil.example/"}
    )
    assert kept["Location"] == reverse("queries:query-detail", args=[action["id"]])


def test_deny_another_users_actions_never_appear_in_my_inbox_or_count(owner, stranger):
    theirs = stranger.post("/api/v1/actions", {**FS, "intent": "the stranger secret plan"}).json()
    assert theirs["status"] == "pending"
    page = review_page(owner)
    assert "the stranger secret plan" not in page
    assert items(page) == []
    assert "<span data-review-waiting>0</span> changes waiting" in page
    assert (
        owner.client.get(reverse("actions:review-list")).content.decode().count("data-action-id")
        == 0
    )


@pytest.mark.sabotage
def test_sabotage_without_the_owner_filter_another_users_action_is_in_my_inbox(
    owner, stranger, monkeypatch
):
    def unscoped(user):
        ids = Action.objects.values_list("query_id", flat=True)
        return Query.objects.filter(pk__in=ids).select_related("action__token")

    monkeypatch.setattr(selectors, "_inbox_queries", unscoped)
    stranger.post("/api/v1/actions", {**FS, "intent": "the stranger secret plan"})
    assert "the stranger secret plan" in review_page(owner)


def test_a_visitor_is_sent_to_sign_in(client):
    answer = client.get(reverse("actions:review"))
    assert answer.status_code == 302 and "/accounts/login/" in answer["Location"]


REST = {
    "kind": "rest",
    "intent": "post the joke to the team channel",
    "forward_code": "print('ts=1700000000.000100')",
    "reverse_code": "print('deleted')",
}


def test_the_owners_keep_on_the_review_page_keeps_a_review_required_rest_action(owner):
    review_required(owner)
    action = owner.post("/api/v1/actions", REST).json()
    assert action["status"] == "pending"
    assert owner.post(f"/api/v1/actions/{action['id']}/keep", {}).status_code == 403
    page = review_page(owner)
    keep_url = reverse("actions:review-keep", args=[action["id"]])
    assert keep_url in page
    kept = owner.client.post(keep_url, HTTP_ACCEPT="application/json")
    assert (kept.status_code, kept.json()) == (200, {"error": ""})
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "kept"
    again = owner.client.post(keep_url)  # a plain form: back to the page, the refusal said there
    assert again["Location"] == reverse("actions:review")
    # Undo runs on its query page, which asks this browser for the credentials it needs.
    undo = reverse("queries:query-detail", args=[action["id"]]) + "#reverse-title"
    assert undo in owner.client.get(reverse("actions:review")).content.decode()


def test_deny_another_user_cannot_keep_my_action_on_their_review_page(owner, stranger):
    review_required(owner)
    action = owner.post("/api/v1/actions", REST).json()
    stranger.client.force_login(stranger.user)
    answer = stranger.client.post(reverse("actions:review-keep", args=[action["id"]]))
    assert answer.status_code == 404
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "pending"


@pytest.mark.sabotage
def test_sabotage_without_the_owner_lookup_another_user_keeps_my_action(
    owner, stranger, monkeypatch
):
    monkeypatch.setattr(views, "get_action_for_user", lambda user, pk: Query.objects.get(pk=pk))
    review_required(owner)
    action = owner.post("/api/v1/actions", REST).json()
    stranger.client.force_login(stranger.user)
    stranger.client.post(reverse("actions:review-keep", args=[action["id"]]))
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "kept"
