"""An action's state in shared/DESIGN.md's words, read from the rows the runs and the change
already keep (its forward Run, its PendingChange, its reverse Run): nothing is stored twice.

queued, running, succeeded / failed (with the reason the query page shows), pending (with the
change), then kept, discarded (by a person, or by the pending timeout: the reason says so),
reversed (the reverse program ran), reverse_failed, expired (a rest action nobody kept or
undid in time: its effect stands).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from webapp.queries.models import Query
from webapp.runs.models import Run, RunDirection, RunStatus
from webapp.runs.status import run_failure
from webapp.workspaces.models import ChangeStatus, PendingChange

STATUSES = (
    "queued",
    "running",
    "succeeded",
    "failed",
    "pending",
    "kept",
    "discarded",
    "reversed",
    "reverse_failed",
    "expired",
)
# What each of the change's states means for the action (its forward run succeeded).
_CHANGE_STATUS = {
    ChangeStatus.RUNNING: "running",
    ChangeStatus.PENDING: "pending",
    ChangeStatus.KEEP_REQUESTED: "pending",
    ChangeStatus.DISCARD_REQUESTED: "pending",
    ChangeStatus.KEPT: "kept",
    ChangeStatus.DISCARDED: "discarded",
    ChangeStatus.FAILED: "failed",
}
REVOKED_REASON = "Discarded: the token that made it was revoked while it waited."
REVOKED_EXPIRED_REASON = (
    "The token that made it was revoked: the effect stands; run the reverse program to take it "
    "back."
)
EXPIRED_REASON = (
    "The effect stands: nobody kept or undid it in time; run the reverse program to take it back."
)


@dataclass(frozen=True)
class ActionState:
    status: str
    reason: str
    forward: Run | None
    reverse: Run | None
    change: PendingChange | None

    @property
    def settled(self) -> bool:
        """Nothing more happens without a request (the forward run and its change are done)."""
        return self.status not in ("queued", "running")


def rest_deadline(forward: Run) -> datetime:
    """When a rest action nobody kept expires (its effect stands)."""
    return (forward.finished_at or forward.created_at) + timedelta(
        seconds=settings.UNDOABLE_REST_PENDING_TIMEOUT_S
    )


def _latest(query: Query, direction: str) -> Run | None:
    return query.runs.filter(direction=direction).order_by("-created_at", "-id").first()


@dataclass(frozen=True)
class StateRows:
    """The rows an action's state is read from: its latest forward and reverse runs and the
    changes they left (`changes` by run id)."""

    forward: Run | None
    reverse: Run | None
    changes: dict[int, PendingChange]


def action_state(query: Query) -> ActionState:
    forward = _latest(query, RunDirection.FORWARD)
    reverse = _latest(query, RunDirection.REVERSE) if forward is not None else None
    runs = [run.pk for run in (forward, reverse) if run is not None]
    changes = {change.run_id: change for change in PendingChange.objects.filter(run_id__in=runs)}
    return action_state_from(query, StateRows(forward, reverse, changes))


def action_states(queries: list[Query]) -> dict[int, ActionState]:
    """action_state of each of `queries` (by id) in three queries, however many there are."""
    latest: dict[tuple[int, str], Run] = {}
    for run in Run.objects.filter(query__in=queries).order_by("-created_at", "-id"):
        latest.setdefault((run.query_id, run.direction), run)
    runs = [run.pk for run in latest.values()]
    changes = {change.run_id: change for change in PendingChange.objects.filter(run_id__in=runs)}
    return {
        query.pk: action_state_from(
            query,
            StateRows(
                latest.get((query.pk, RunDirection.FORWARD)),
                latest.get((query.pk, RunDirection.REVERSE)),
                changes,
            ),
        )
        for query in queries
    }


def action_state_from(query: Query, rows: StateRows) -> ActionState:
    """The state `rows` say `query`'s action is in (no query of its own but `query.action`,
    which callers select_related)."""
    forward, reverse = rows.forward, rows.reverse
    if forward is None:
        return _before_forward(query)
    change = rows.changes.get(forward.pk)
    if reverse is not None and reverse.created_at < forward.created_at:
        reverse = None  # undid an earlier forward run (a query re-run in the browser)

    def state(status: str, reason: str = "") -> ActionState:
        return ActionState(status, reason, forward, reverse, change)

    if forward.status in (RunStatus.QUEUED, RunStatus.RUNNING):
        return state(str(forward.status))
    if forward.status != RunStatus.SUCCEEDED:
        return state("failed", run_failure(forward).reason)
    if reverse is not None:
        if reverse.status in (RunStatus.QUEUED, RunStatus.RUNNING):
            return state("running")
        if reverse.status != RunStatus.SUCCEEDED:
            return state("reverse_failed", run_failure(reverse).reason)
        if query.kind not in ("fs", "db"):
            return state("reversed")
        # The reverse program's own change is applied on the Undo's behalf (services).
        undone = rows.changes.get(reverse.pk)
        if undone is None or undone.status == ChangeStatus.FAILED:
            return state("reverse_failed", undone.message if undone else "No change was left.")
        if undone.status == ChangeStatus.KEPT:
            return state("reversed")
        if undone.status == ChangeStatus.DISCARDED:
            return state("reverse_failed", undone.message)
        return state("running")
    action = getattr(query, "action", None)
    revoked = action is not None and action.token_revoked_at is not None
    if query.kind in ("fs", "db"):
        if change is None:
            return state("failed", "The run left no change to decide on.")
        status = _CHANGE_STATUS[ChangeStatus(change.status)]
        if status == "discarded" and revoked:
            return state(status, REVOKED_REASON)
        return state(status, change.message if status in ("discarded", "failed") else "")
    if query.kind == "rest":
        if action is not None and action.kept_at is not None:
            return state("kept")
        if revoked:
            return state("expired", REVOKED_EXPIRED_REASON)
        expired = action is not None and action.expired_at is not None
        expired = expired or timezone.now() >= rest_deadline(forward)
        return state("expired", EXPIRED_REASON) if expired else state("pending")
    return state("succeeded")


def _before_forward(query: Query) -> ActionState:
    """No forward run yet: queued, unless its rehearsal ended it (webapp.actions.rehearsals):
    `rehearse: "only"` is a change thrown away unmade, a failed rehearsal a refusal."""
    action = getattr(query, "action", None)
    stopped = (action.rehearsal or {}).get("stopped") if action is not None else None
    if not stopped:
        return ActionState("queued", "", None, None, None)
    status = "discarded" if stopped.startswith("Rehearsal only") else "failed"
    return ActionState(status, stopped, None, None, None)


def change_json(query: Query, state: ActionState, stdout: str) -> Any:
    """The change an action leaves: the fs change list (paths, kind of change, modes, diff
    preview), the db statements with their outcome, or a rest action's forward output."""
    if query.kind == "rest" and state.forward is not None:
        return {"forward_output": stdout}
    if state.change is None:
        return None
    return {
        "status": state.change.status,
        "message": state.change.message,
        "engine": state.change.engine or None,
        "deadline": state.change.deadline.isoformat() if state.change.deadline else None,
        "timed_out": state.change.timed_out,
        "entries": state.change.changes,
        "undo_check": state.change.undo_check,
    }
