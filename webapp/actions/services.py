"""Writes for actions: create-and-run, Keep, Discard, Undo.

Each goes through the services the query page uses (queries' rows, runs.services.query_run,
workspaces.services' change_keep / change_discard): an action made here is a query like any
other, and what the page does to it the API does the same way.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from webapp import lifecycle
from webapp.actions.limits import limits_check, review_check
from webapp.actions.models import Action
from webapp.actions.rehearsals import (
    ONLY_REASON,
    RehearsalRefused,
    action_rehearse,
    rehearsal_possible,
    rehearsal_stop,
)
from webapp.actions.requests import ActionRequest
from webapp.actions.state import ActionState, action_state, rest_deadline
from webapp.agents.models import ApiToken
from webapp.audit.models import AuditEvent
from webapp.audit.services import audit_action, audit_query
from webapp.executor_glue import InvalidSpec, NothingPending, validate_relative_path
from webapp.queries.models import Query
from webapp.runs.models import Run, RunDirection, RunStatus
from webapp.runs.services import CredentialsMissing, query_run
from webapp.workspaces import services as workspaces
from webapp.workspaces.models import ChangeStatus, PendingChange, Workspace
from webapp.workspaces.selectors import get_workspace_for_user
from webapp.workspaces.waiting import waiting_publish

logger = logging.getLogger(__name__)

DEFAULT_PROMPT = "Action from the API"


class ActionRefused(Exception):
    """The request cannot be done as asked; nothing ran. `status` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def action_create(
    *, token: ApiToken, request: ActionRequest, idempotency_key: str = ""
) -> tuple[Query, bool]:
    """Save the action as a query and start its forward run; (query, created).

    With an `idempotency_key` this owner used before, nothing runs: the earlier action is
    returned (created False), or ActionRefused 409 when the request differs from that one.
    """
    owner = token.owner
    digest = request.digest()
    if idempotency_key:
        earlier = _earlier(owner, idempotency_key, digest)
        if earlier is not None:
            return earlier, False
    if request.postgres and request.postgres not in request.credentials:
        raise ActionRefused(400, f"db.url names credential {request.postgres!r}: give it")
    if request.sqlite is not None:
        try:
            validate_relative_path(request.sqlite)
        except InvalidSpec as exc:
            raise ActionRefused(400, f"db.sqlite: {exc}") from None
    if request.rehearse:
        rehearsal_check(request.kind, request.reverse_code)
    try:
        with transaction.atomic():
            limits_check(token=token, request=request)  # LimitExceeded: nothing is saved
            workspace = _workspace(owner, request)
            query = Query.objects.create(
                owner=owner,
                prompt=request.intent.strip() or DEFAULT_PROMPT,
                kind=request.kind,
                forward_code=request.forward_code,
                reverse_code=request.reverse_code,
                hosts=request.hosts,
                credential_names=sorted(request.credentials),
                probe_code=request.probe,
            )
            Action.objects.create(
                query=query,
                owner=owner,
                token=token,
                intent=request.intent,
                idempotency_key=idempotency_key,
                request_digest=digest,
            )
            audit_action(query=query, token=token, secrets=request.credentials.values())
            if workspace is not None:
                workspaces.workspace_attach(query=query, workspace=workspace)
                _db_target(workspace, request)
            if not request.rehearse:
                query_run(
                    query=query, credentials=request.credentials, wall_time_s=request.wall_time_s
                )
    except CredentialsMissing as exc:  # a credential given empty: the whole request is undone
        raise ActionRefused(400, _given_again(exc)) from None
    except IntegrityError:
        # The same key, at the same time, from a retry that won the race: that one runs.
        earlier = _earlier(owner, idempotency_key, digest) if idempotency_key else None
        if earlier is None:
            raise
        return earlier, False
    logger.info("action created", extra={"query_id": query.pk, "kind": request.kind})
    if request.rehearse:
        _rehearsed_first(query, request)
    return query, True


def rehearsal_check(kind: str, reverse_code: str) -> None:
    """ActionRefused 400 unless an action of `kind` with this reverse program can be rehearsed."""
    try:
        rehearsal_possible(kind, reverse_code)
    except RehearsalRefused as exc:
        raise ActionRefused(exc.status, f"rehearse: {exc.message}") from None


def _rehearsed_first(query: Query, request: ActionRequest) -> None:
    """Rehearse, then run for real only when asked and the reverse program restores the state;
    otherwise the action ends with the rehearsal, saying why (action_state)."""
    try:
        verdict = action_rehearse(
            query=query, credentials=request.credentials, wall_time_s=request.wall_time_s
        )
    except RehearsalRefused as exc:
        rehearsal_stop(query=query, why=f"Not run: the rehearsal could not start ({exc.message}).")
        return
    if request.rehearse == "only":
        rehearsal_stop(query=query, why=ONLY_REASON)
    elif not verdict["restored"]:
        rehearsal_stop(
            query=query,
            why=f"Not run: the rehearsal says the reverse program does not restore the state "
            f"({verdict['message']}).",
        )
    else:
        try:
            query_run(query=query, credentials=request.credentials, wall_time_s=request.wall_time_s)
        except CredentialsMissing as exc:
            rehearsal_stop(query=query, why=_given_again(exc))


def _earlier(owner: User, key: str, digest: str) -> Query | None:
    found = Action.objects.select_related("query").filter(owner=owner, idempotency_key=key).first()
    if found is None:
        return None
    if found.request_digest != digest:
        raise ActionRefused(
            409,
            "this Idempotency-Key was used for a different request; use a new key for a new action",
        )
    return found.query


def _workspace(owner: User, request: ActionRequest) -> Workspace | None:
    """The workspace an fs or db action works in: the one named, or a new one."""
    if request.kind not in ("fs", "db"):
        if request.workspace is not None or request.sqlite or request.postgres:
            raise ActionRefused(400, f"a {request.kind} action has no workspace or db target")
        return None
    if request.kind == "fs" and (request.sqlite or request.postgres):
        raise ActionRefused(400, "an fs action has no db target")
    if request.workspace is None:
        return workspaces.workspace_create(owner=owner)
    return get_workspace_for_user(owner, request.workspace)


def _db_target(workspace: Workspace, request: ActionRequest) -> None:
    """The db target is the workspace's (the query page's panel sets it the same way)."""
    if request.kind != "db":
        return
    fields = []
    if request.sqlite:
        workspace.sqlite_path = request.sqlite
        fields.append("sqlite_path")
    # The db run uses the database of this credential's URL when it has a value (its scheme
    # picks PostgreSQL or MariaDB/MySQL), else the SQLite file.
    workspace.postgres_url_credential = request.postgres or ""
    fields.append("postgres_url_credential")
    workspace.save(update_fields=fields)


def _forward_change(query: Query) -> PendingChange | None:
    forward = query.runs.filter(direction=RunDirection.FORWARD).order_by("-created_at").first()
    return PendingChange.objects.filter(run=forward).first() if forward else None


def action_keep(*, query: Query) -> None:
    """Keep through the API: apply a pending fs/db change; for rest, record that its effect
    stands.

    LimitExceeded when the action's token requires its owner's review: the owner keeps it on
    the Review page (action_keep_reviewed, or the query page's Keep of a change)."""
    state = _pending(query, "keep")
    action = Action.objects.filter(query=query).select_related("token").first()
    review_check(
        token=action.token if action else None,
        review_url=reverse("actions:review") + f"#action-{query.pk}",
    )
    _keep(query, state)


def action_keep_reviewed(*, query: Query) -> None:
    """The owner's Keep on the Review page: a signed-in person, never a token, so a token's
    review requirement is what this fulfils rather than a reason to refuse."""
    _keep(query, _pending(query, "keep"))


def _keep(query: Query, state: ActionState) -> None:
    if query.kind == "rest":
        assert state.forward is not None
        now = timezone.now()
        if lifecycle.rest_action_keep(query.pk, now=now, deadline=rest_deadline(state.forward)):
            audit_query(
                event=AuditEvent.KEEP, query=query, target=f"action {query.pk}", outcome="kept"
            )
            waiting_publish(owner_id=query.owner_id)  # it no longer waits: the header's count
            return
        if Action.objects.filter(query=query).exists():
            _pending(query, "keep")  # revoked, expired or kept meanwhile: that stands (409)
            return
        # A query made in the browser has no Action row; its Keep makes one.
        _, made = Action.objects.get_or_create(
            query=query, defaults={"owner": query.owner, "kept_at": now}
        )
        if not made:  # its expiry made the row meanwhile: that stands (409)
            _pending(query, "keep")
            return
        audit_query(event=AuditEvent.KEEP, query=query, target=f"action {query.pk}", outcome="kept")
        return
    change = _forward_change(query)
    assert change is not None and state.status == "pending"
    with _decision_raced():
        workspaces.change_keep(change=change)


def action_discard(*, query: Query) -> None:
    """Discard a pending fs/db change (a rest action's effect cannot be thrown away)."""
    if query.kind == "rest":
        raise ActionRefused(
            409, "a rest action's effect already happened: undo runs its reverse program"
        )
    _pending(query, "discard")
    change = _forward_change(query)
    assert change is not None
    with _decision_raced():
        workspaces.change_discard(change=change)


@contextlib.contextmanager
def _decision_raced() -> Iterator[None]:
    """Another Keep, Discard or the pending timeout decided between our read and our write:
    the change services' conditional updates let exactly one win; the others get 409."""
    try:
        yield
    except NothingPending as exc:
        raise ActionRefused(409, f"{exc}; GET the action for how it ended") from None


def action_undo(*, query: Query, credentials: dict[str, str]) -> Run | None:
    """Take the action back by what fits its state: Discard while an fs/db change is pending,
    else run the reverse program (it gets FORWARD_OUTPUT); the Run, or None for a Discard."""
    state = action_state(query)
    if state.status == "pending" and query.kind in ("fs", "db"):
        action_discard(query=query)
        return None
    if state.status not in ("pending", "kept", "succeeded", "expired", "reverse_failed"):
        raise ActionRefused(409, f"a {state.status} action has nothing to undo")
    if not query.reverse_code.strip():
        raise ActionRefused(409, "this action has no reverse program")
    try:
        run = query_run(query=query, direction=RunDirection.REVERSE, credentials=credentials)
    except CredentialsMissing as exc:
        raise ActionRefused(400, _given_again(exc)) from None
    waiting_publish(owner_id=query.owner_id)  # a pending rest action no longer waits
    return run


def _given_again(exc: CredentialsMissing) -> str:
    return (
        f"Missing credential: {', '.join(exc.names)}. Nothing was run: the server keeps no "
        "credential, give it again in this call's `credentials`."
    )


def _pending(query: Query, verb: str) -> ActionState:
    state = action_state(query)
    if state.status != "pending":
        raise ActionRefused(409, f"only a pending action can {verb}; this one is {state.status}")
    return state


def action_reverse_settle(*, query: Query) -> None:
    """Keep the change an Undo's reverse program left in an fs/db action's workspace: the
    person asked for it by asking to undo. Nothing when there is none waiting."""
    if query.kind not in ("fs", "db"):
        return
    reverse = query.runs.filter(direction=RunDirection.REVERSE).order_by("-created_at").first()
    change = PendingChange.objects.filter(run=reverse, status=ChangeStatus.PENDING).first()
    if change is None:
        return
    with contextlib.suppress(NothingPending):  # kept (or timed out) by another request meanwhile
        workspaces.change_keep(change=change)


def rest_action_waiting_started(run: Run) -> None:
    """A run ended (webapp.runs.ended): when it is the forward run of a token's rest action and
    succeeded, the action now waits for Keep or Undo (selectors.rest_actions_waiting), so its
    owner's count of things waiting moves."""
    if run.direction != RunDirection.FORWARD or run.status != RunStatus.SUCCEEDED:
        return
    query = run.query
    if query.kind == "rest" and Action.objects.filter(query=query, token__isnull=False).exists():
        waiting_publish(owner_id=query.owner_id)


def actions_end_for_revoked_token(*, token: ApiToken, **_: object) -> None:
    """The token was revoked: its pending fs and db actions are discarded, its pending rest
    actions expire (their effect stands); each records why (`token_revoked_at`)."""
    now = timezone.now()
    for action in Action.objects.filter(token=token).select_related("query"):
        state = action_state(action.query)
        if state.status != "pending":
            continue
        if not lifecycle.action_token_revoked(action.pk, now=now):
            continue  # kept (or ended) meanwhile: that stands
        if action.query.kind in ("fs", "db") and state.change is not None:
            with contextlib.suppress(NothingPending, ActionRefused), _decision_raced():
                workspaces.change_discard(change=state.change)
        logger.info("action ended: its token was revoked", extra={"query_id": action.query_id})
        waiting_publish(owner_id=action.owner_id)
