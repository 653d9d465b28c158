"""A rest action's expiry is a `timeout` entry in the ledger, written once by the winner of its
move (lifecycle.rest_action_expire) from the reaper's pass."""

from __future__ import annotations

import pytest
from django.db.models import Q
from django.utils import timezone

from webapp import lifecycle
from webapp.actions import expiry
from webapp.actions.models import Action
from webapp.actions.state import EXPIRED_REASON
from webapp.audit.models import AuditEntry
from webapp.audit.verify import audit_verify

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")

REST = {
    "kind": "rest",
    "intent": "post the joke to the team channel",
    "forward_code": "print('ts=1700000000.000100')",
    "reverse_code": "print('deleted')",
}


def timeouts() -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(event="timeout"))


def test_a_rest_action_past_its_deadline_is_recorded_once(owner, settings):
    action = owner.post("/api/v1/actions", REST).json()
    assert expiry.rest_actions_expire() == []  # not yet past its deadline
    settings.UNDOABLE_REST_PENDING_TIMEOUT_S = 0
    assert expiry.rest_actions_expire() == [action["id"]]
    assert expiry.rest_actions_expire() == []
    [entry] = timeouts()
    assert (entry.kind, entry.target) == ("rest", f"action {action['id']}")
    assert entry.outcome == f"expired: {EXPIRED_REASON}"[:200]
    assert audit_verify()[1] is None
    assert owner.get(f"/api/v1/actions/{action['id']}").json()["status"] == "expired"
    assert owner.post(f"/api/v1/actions/{action['id']}/keep", {}).status_code == 409


def test_a_rest_query_without_an_action_row_gets_one_when_it_expires(owner, settings):
    action = owner.post("/api/v1/actions", REST).json()
    Action.objects.filter(pk=action["id"]).delete()  # as a query run in the browser has none
    settings.UNDOABLE_REST_PENDING_TIMEOUT_S = 0
    assert expiry.rest_actions_expire() == [action["id"]]
    assert Action.objects.get(pk=action["id"]).expired_at is not None
    assert len(timeouts()) == 1


def test_a_kept_or_undone_rest_action_never_expires(owner, settings):
    kept = owner.post("/api/v1/actions", REST).json()
    assert owner.post(f"/api/v1/actions/{kept['id']}/keep", {}).status_code == 200
    undone = owner.post("/api/v1/actions", REST).json()
    owner.post(f"/api/v1/actions/{undone['id']}/undo", {"credentials": {}})
    settings.UNDOABLE_REST_PENDING_TIMEOUT_S = 0
    assert expiry._candidates(timezone.now()) == []  # not even read again each pass
    assert expiry.rest_actions_expire() == []
    assert timeouts() == []


def stale_passes(monkeypatch) -> None:
    """Two reapers that both read the action as waiting before either wrote its expiry."""
    read = expiry._candidates
    seen: list = []

    def stale(now):
        if not seen:
            seen.extend(read(now))
        return list(seen)

    monkeypatch.setattr(expiry, "_candidates", stale)
    expiry.rest_actions_expire()
    expiry.rest_actions_expire()


def test_deny_two_reapers_racing_over_one_expiry_leave_one_entry(owner, settings, monkeypatch):
    owner.post("/api/v1/actions", REST)
    settings.UNDOABLE_REST_PENDING_TIMEOUT_S = 0
    stale_passes(monkeypatch)
    assert len(timeouts()) == 1


def test_sabotage_without_the_conditional_move_both_reapers_write_it(owner, settings, monkeypatch):
    monkeypatch.setattr(lifecycle, "_waiting", lambda query_id: Q(query_id=query_id))
    owner.post("/api/v1/actions", REST)
    settings.UNDOABLE_REST_PENDING_TIMEOUT_S = 0
    stale_passes(monkeypatch)
    assert len(timeouts()) == 2
