"""Reads of actions, scoped to their owner: another user's action is a 404, and never listed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q, QuerySet
from django.http import Http404
from django.urls import reverse
from django.utils import timezone

from webapp.actions.models import Action
from webapp.actions.output import action_json, run_streams_for
from webapp.actions.state import ActionState, action_states, rest_deadline
from webapp.queries.models import Query
from webapp.runs.images import run_image_payloads_for
from webapp.runs.models import RunDirection
from webapp.runs.payloads import ImagePayload
from webapp.workspaces.models import ChangeStatus, PendingChange
from webapp.workspaces.selectors import changes_waiting_for_user
from webapp.workspaces.waiting import Waiting

MAX_LISTED = 100
# A query is an action once it ran forward, or once the API made it (rehearse "only" runs none).
_IS_ACTION = Q(runs__direction=RunDirection.FORWARD) | Q(action__isnull=False)


def get_action_for_user(user: User | AnonymousUser, action_id: int) -> Query:
    """The user's own query that ran (an action, made here or in the browser) or that the API
    made and only rehearsed, or Http404."""
    if not user.is_authenticated:
        raise Http404("No such action")
    found = Query.objects.filter(_IS_ACTION, pk=action_id, owner=user).first()
    if found is None:
        raise Http404("No such action")
    return found


def action_list_for_user(
    user: User, *, status: str | None = None, kind: str | None = None, token: str | None = None
) -> list[dict[str, Any]]:
    """The user's latest actions (newest first), filtered by status, kind and the prefix of
    the token that made them."""
    queries = Query.objects.filter(_IS_ACTION, owner=user).distinct()
    if kind:
        queries = queries.filter(kind=kind)
    if token:
        queries = queries.filter(action__token__prefix=token)
    found = [action_json(query) for query in queries.order_by("-created_at", "-id")[:MAX_LISTED]]
    return [action for action in found if status is None or action["status"] == status]


MAX_REVIEWED = 50


@dataclass(frozen=True)
class ReviewItem:
    """One action as the Review page shows it."""

    query: Query
    status: str  # webapp.actions.state's words
    reason: str
    token_name: str  # "" for a query run in the browser
    intent: str
    stdout: str
    stderr: str
    change: PendingChange | None  # the forward run's fs/db change
    images: list[ImagePayload]
    forward_run_id: int | None

    @property
    def pk(self) -> int:
        return self.query.pk

    @property
    def waiting(self) -> bool:
        """Waits for its owner: Keep or Discard (fs, db), Keep or Undo (rest)."""
        return self.status == "pending"

    @property
    def change_waiting(self) -> bool:
        """One of the header's "changes waiting" (its Keep and Discard are on this page)."""
        return self.change is not None and self.change.status == ChangeStatus.PENDING


def review_inbox_for_user(user: User) -> list[ReviewItem]:
    """What the Review page lists: the actions the user's tokens made (the latest
    MAX_REVIEWED), and every change of theirs waiting (the header's count, wherever it was
    made); those waiting first, oldest first, then the rest newest first. A fixed number of
    queries however many it lists."""
    queries = list(_inbox_queries(user))
    states = action_states(queries)
    forwards = [state.forward for state in states.values() if state.forward is not None]
    streams = run_streams_for(forwards)
    images = run_image_payloads_for(forwards)
    items = [_review_item(query, states[query.pk], streams, images) for query in queries]
    waiting = sorted((i for i in items if i.waiting), key=lambda i: (i.query.created_at, i.pk))
    return waiting + [item for item in items if not item.waiting]


def _inbox_queries(user: User) -> QuerySet[Query]:
    """The user's own queries the inbox shows: their tokens' actions and their changes waiting.
    The one place the inbox is scoped to its owner."""
    waiting_ids = [change.run.query_id for change in changes_waiting_for_user(user)]
    agents_ids = list(
        Action.objects.filter(owner=user, token__isnull=False)
        .order_by("-created_at")
        .values_list("query_id", flat=True)[:MAX_REVIEWED]
    )
    return (
        Query.objects.filter(owner=user, pk__in={*waiting_ids, *agents_ids})
        .select_related("action__token")
        .order_by("-created_at", "-id")
    )


def _review_item(
    query: Query,
    state: ActionState,
    streams: dict[int, dict[str, str]],
    images: dict[int, list[ImagePayload]],
) -> ReviewItem:
    action = getattr(query, "action", None)
    forward_id = state.forward.pk if state.forward else None
    output = streams.get(forward_id, {}) if forward_id else {}
    return ReviewItem(
        query=query,
        status=state.status,
        reason=state.reason,
        token_name=(action.token.name or action.token.prefix) if action and action.token else "",
        intent=action.intent if action and action.intent else query.prompt,
        stdout=output.get("stdout", ""),
        stderr=output.get("stderr", ""),
        change=state.change,
        images=images.get(forward_id, []) if forward_id else [],
        forward_run_id=forward_id,
    )


def rest_actions_waiting(user: User) -> Waiting:
    """The user's agents' rest actions that are pending: their effect stands, waiting for
    Keep or Undo until the rest pending timeout. One of the header's things waiting."""
    cutoff = timezone.now() - timedelta(seconds=settings.UNDOABLE_REST_PENDING_TIMEOUT_S)
    candidates = list(
        Query.objects.filter(
            owner=user,
            kind="rest",
            action__token__isnull=False,
            action__kept_at__isnull=True,
            action__token_revoked_at__isnull=True,
            runs__direction=RunDirection.FORWARD,
            runs__finished_at__gte=cutoff,
        )
        .distinct()
        .select_related("action")
        .order_by("created_at", "id")
    )
    states = action_states(candidates)
    pending = [query for query in candidates if states[query.pk].status == "pending"]
    review = reverse("actions:review")
    deadlines = [rest_deadline(forward) for q in pending if (forward := states[q.pk].forward)]
    return Waiting(
        urls=[f"{review}#action-{query.pk}" for query in pending],
        list_url=review,
        ends_at=min(deadlines, default=None),  # it expires on read: no event marks it
    )
