"""Orphaned changes (their worker died) end and free the workspace for the next run."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tests.factories import QueryFactory, RunFactory
from webapp.runs.models import RunStatus
from webapp.workspaces import services as ws
from webapp.workspaces.models import ChangeStatus, PendingChange
from webapp.workspaces.reaper import HOLDER_LOST, changes_reap

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces_root")]
LONG_AGO = timezone.now() - dt.timedelta(hours=1)


def reserved_change(*, kind: str, status: str, run_status: str, deadline=None) -> PendingChange:
    run = RunFactory(query=QueryFactory(kind=kind), status=run_status, finished_at=LONG_AGO)
    ws.workspace_fs(ws.workspace_for_query(run.query)).reserve(str(run.pk))
    return PendingChange.objects.create(run=run, kind=kind, status=status, deadline=deadline)


def test_a_db_change_past_its_deadline_with_no_holder_ends_and_frees_the_workspace():
    change = reserved_change(
        kind="db", status=ChangeStatus.PENDING, run_status=RunStatus.SUCCEEDED, deadline=LONG_AGO
    )
    assert changes_reap() == [change.pk]
    change.refresh_from_db()
    assert (change.status, change.message) == (ChangeStatus.DISCARDED, HOLDER_LOST)
    assert ws.workspace_fs(ws.workspace_for_query(change.run.query)).pending() is None


def test_a_running_change_whose_run_was_reaped_ends_and_frees_the_workspace():
    change = reserved_change(kind="fs", status=ChangeStatus.RUNNING, run_status=RunStatus.FAILED)
    assert changes_reap() == [change.pk]
    change.refresh_from_db()
    assert change.status == ChangeStatus.FAILED  # it never waited for a decision
    assert ws.workspace_fs(ws.workspace_for_query(change.run.query)).pending() is None


def test_a_change_still_within_its_time_is_left_alone():
    soon = timezone.now() + dt.timedelta(minutes=5)
    change = reserved_change(
        kind="db", status=ChangeStatus.PENDING, run_status=RunStatus.SUCCEEDED, deadline=soon
    )
    assert changes_reap() == []
    assert ws.workspace_fs(ws.workspace_for_query(change.run.query)).pending() is not None
