"""The one writer of every lifecycle status: a Run's, a PendingChange's, and how a rest action
ended (its Keep or its token's revocation; the rest of an action's state is its run's and
change's, webapp.actions.state).

Each state machine is data: for every state, the states it may be entered from. A move is ONE
conditional UPDATE (`UPDATE ... SET status = to WHERE pk = ... AND status IN (allowed from)`),
so when two callers race (Keep and Discard, Keep and the pending timeout, the worker and the
run reaper) the database lets exactly one of them win; `move` says whether this caller did,
and the caller handles losing (a clear error, or nothing). No other module writes these
columns: tests/webapp/test_lifecycle_owner.py checks the whole source tree for that.

Runs and changes live in two apps built one on the other (runs <- workspaces) and both move
through here, so this module imports neither: it names their models by app label and finds
them in Django's app registry when a move is made.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import IntegrityError, transaction
from django.db.models import Model, Q


@dataclass(frozen=True)
class Machine:
    """A status column's states: `moves` maps each state to the states it may come from;
    `initial` is the one a row is created in (the column's default)."""

    model: str  # "app_label.ModelName"
    initial: str
    moves: Mapping[str, frozenset[str]]

    def allowed_from(self, to: str) -> frozenset[str]:
        if to not in self.moves:
            raise ValueError(f"{self.model}: nothing moves to {to!r}")
        return self.moves[to]


RUN = Machine(
    model="runs.Run",
    initial="queued",
    moves={
        "running": frozenset({"queued"}),
        "succeeded": frozenset({"running"}),
        "timed_out": frozenset({"running"}),
        # A queued run fails without starting (validation, a server stopping, never taken by
        # a worker); a running one by its result, an infrastructure error or the reaper.
        "failed": frozenset({"queued", "running"}),
        "cancelled": frozenset({"queued", "running"}),
    },
)

CHANGE = Machine(
    model="workspaces.PendingChange",
    initial="running",
    moves={
        "pending": frozenset({"running"}),
        # A db change's choice, written for its holder thread to apply.
        "keep_requested": frozenset({"pending"}),
        "discard_requested": frozenset({"pending"}),
        # running: an fs run that changed nothing; pending: an fs Keep; keep_requested: the
        # db holder committed.
        "kept": frozenset({"running", "pending", "keep_requested"}),
        # keep_requested too: the reaper ends a change whose holder is gone, whatever it waited for.
        "discarded": frozenset({"pending", "keep_requested", "discard_requested"}),
        "failed": frozenset({"running", "pending", "keep_requested", "discard_requested"}),
        "reversed": frozenset({"kept"}),
    },
)

MACHINES = (RUN, CHANGE)


def move(
    machine: Machine,
    row: int | Model,
    to: str,
    *,
    from_: Collection[str] | None = None,
    where: Q | None = None,
    **fields: Any,
) -> bool:
    """Move `row` (a primary key, or the model instance, which then follows a move it won) to
    `to`, writing `fields` with it, if its status is one it may come from; True if this call
    made the move. `from_` narrows the table's sources for a caller that acts only on the
    state it read; `where` adds a condition of the caller's to the same UPDATE."""
    allowed = machine.allowed_from(to)
    sources = allowed if from_ is None else frozenset(from_)
    if not sources <= allowed:
        raise ValueError(f"{machine.model}: {to!r} may not come from {sorted(sources - allowed)!r}")
    pk = row.pk if isinstance(row, Model) else row
    condition = Q(pk=pk, status__in=sorted(sources))
    if where is not None:
        condition &= where
    won = bool(apps.get_model(machine.model).objects.filter(condition).update(status=to, **fields))
    if won and isinstance(row, Model):
        for name, value in {"status": to, **fields}.items():
            setattr(row, name, value)
    return won


def run_move(
    run: int | Model,
    to: str,
    *,
    from_: Collection[str] | None = None,
    where: Q | None = None,
    **fields: Any,
) -> bool:
    """A Run's move (RUN's table)."""
    return move(RUN, run, to, from_=from_, where=where, **fields)


def change_move(
    change: int | Model, to: str, *, from_: Collection[str] | None = None, **fields: Any
) -> bool:
    """A PendingChange's move (CHANGE's table)."""
    return move(CHANGE, change, to, from_=from_, **fields)


# An action's own state is read from its runs and change (webapp.actions.state); the Action row
# adds only what ends a rest action: its Keep, its token revoked while it waited, or its
# expiry. Each is written once, and only while none happened, so they have one winner.
ACTION = "actions.Action"


def rest_action_keep(query_id: int, *, now: datetime, deadline: datetime) -> bool:
    """A rest action's Keep, recorded at `now` if it still waits: not kept, its token not
    revoked, and before its `deadline` (past it the action has expired); True if recorded."""
    if now >= deadline:
        return False
    return bool(apps.get_model(ACTION).objects.filter(_waiting(query_id)).update(kept_at=now))


def _waiting(query_id: int) -> Q:
    return Q(
        query_id=query_id,
        kept_at__isnull=True,
        token_revoked_at__isnull=True,
        expired_at__isnull=True,
    )


def rest_action_expire(query_id: int, *, owner_id: int, now: datetime, deadline: datetime) -> bool:
    """Record at `now` that a rest action nobody kept expired, if it is past its `deadline`
    and still waits; True if this call recorded it (and so writes its ledger entry). A query
    run in the browser has no Action row yet: the first insert of one wins."""
    if now < deadline:
        return False
    model = apps.get_model(ACTION)
    if model.objects.filter(_waiting(query_id)).update(expired_at=now):
        return True
    if model.objects.filter(query_id=query_id).exists():
        return False  # kept, revoked or expired already
    try:
        with transaction.atomic():
            model.objects.create(query_id=query_id, owner_id=owner_id, expired_at=now)
    except IntegrityError:
        return False  # a Keep (or another expiry) made the row first
    return True


def action_token_revoked(query_id: int, *, now: datetime) -> bool:
    """Record that the action's token was revoked while it waited; False if it was kept or
    its revocation recorded first."""
    return bool(
        apps.get_model(ACTION).objects.filter(_waiting(query_id)).update(token_revoked_at=now)
    )
