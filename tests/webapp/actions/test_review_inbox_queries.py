"""The Review page reads its actions in a fixed number of queries: 50 actions cost no more
queries than 5 (their runs, changes, output and images are each read for all at once)."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from tests.factories import QueryFactory, RunChunkFactory, RunFactory
from webapp.actions.models import Action
from webapp.agents.models import ApiToken
from webapp.runs.models import RunDirection, RunStatus
from webapp.workspaces.models import ChangeStatus, PendingChange

KINDS = ("fs", "python", "rest", "db")


def make_actions(persona, count: int) -> None:
    """`count` actions of the persona's token, of every kind, each with its output; the fs and
    db ones with a change waiting, every third one undone by its reverse program."""
    token = ApiToken.objects.get(owner=persona.user)
    for n in range(count):
        kind = KINDS[n % len(KINDS)]
        query = QueryFactory(owner=persona.user, kind=kind)
        Action.objects.create(query=query, owner=persona.user, token=token, intent=f"act {n}")
        done = {"status": RunStatus.SUCCEEDED, "exit_code": 0, "finished_at": timezone.now()}
        forward = RunFactory(query=query, **done)
        RunChunkFactory(run=forward)
        if kind in ("fs", "db"):
            PendingChange.objects.create(
                run=forward,
                kind=kind,
                status=ChangeStatus.PENDING,
                changes=[{"path": f"file-{n}.txt", "action": "added", "kind": "file"}],
            )
        elif n % 3 == 0:
            RunFactory(query=query, direction=RunDirection.REVERSE, **done)


def review_queries(persona, django_assert_max_num_queries, most: int) -> int:
    with django_assert_max_num_queries(most) as counted:
        page = persona.client.get(reverse("actions:review"))
    assert page.status_code == 200
    return len(counted.captured_queries)


def test_fifty_actions_cost_the_review_page_no_more_queries_than_five(
    owner, django_assert_max_num_queries
):
    owner.client.force_login(owner.user)
    make_actions(owner, 5)
    few = review_queries(owner, django_assert_max_num_queries, 1000)
    make_actions(owner, 45)
    page = owner.client.get(reverse("actions:review")).content.decode()
    assert page.count('data-testid="review-item"') == 50
    review_queries(owner, django_assert_max_num_queries, few)
