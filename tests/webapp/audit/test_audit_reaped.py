"""A change the reaper ends because its holder is gone is a Discard in the ledger, with why."""

from __future__ import annotations

import pytest

from tests.webapp.workspaces.test_reaper import LONG_AGO, reserved_change
from webapp.audit.models import AuditEntry
from webapp.audit.verify import audit_verify
from webapp.runs.models import RunStatus
from webapp.workspaces.models import ChangeStatus
from webapp.workspaces.reaper import HOLDER_LOST, changes_reap

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces_root")]


def test_an_orphaned_db_change_the_reaper_discards_is_recorded_once():
    change = reserved_change(
        kind="db", status=ChangeStatus.PENDING, run_status=RunStatus.SUCCEEDED, deadline=LONG_AGO
    )
    assert changes_reap() == [change.pk]
    assert changes_reap() == []
    entry = AuditEntry.objects.get()
    assert (entry.event, entry.kind) == ("discard", "db")
    assert entry.outcome == f"discarded: {HOLDER_LOST}"[:200]
    assert entry.target == f"change {change.pk} (run {change.run_id})"
    assert audit_verify()[1] is None


def test_a_running_change_that_never_waited_records_nothing():
    reserved_change(kind="fs", status=ChangeStatus.RUNNING, run_status=RunStatus.FAILED)
    assert len(changes_reap()) == 1
    assert not AuditEntry.objects.exists()
