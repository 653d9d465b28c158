"""How a run ended is one entry, appended by whoever made the final move: the worker (succeeded,
failed), the reaper (its worker lost) or a Stop before it started. A loser of the race appends
nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings
from django.utils import timezone

from tests.factories import QueryFactory, RunFactory
from tests.webapp.runs.test_run_reliability import finished, started_run
from webapp.audit.models import AuditEntry
from webapp.audit.services import sha256_text
from webapp.audit.verify import audit_verify
from webapp.runs.models import Run, RunStatus
from webapp.runs.reaper import WORKER_LOST, runs_reap
from webapp.runs.services import run_cancel, run_start

pytestmark = pytest.mark.usefixtures("threads_runner")


def ended(run: Run) -> list[str]:
    """The outcomes recorded for the run after it was queued."""
    entries = AuditEntry.objects.filter(target=f"run {run.pk} (forward)").order_by("seq")
    return [e.outcome for e in entries if e.outcome != "queued"]


def started(code: str) -> Run:
    run = RunFactory(query=QueryFactory(forward_code=code))
    run_start(run=run, credentials={})
    return finished(run)


def test_a_run_that_succeeds_records_its_end_once():
    run = started("print('hi')\n")
    assert run.status == RunStatus.SUCCEEDED
    assert ended(run) == ["succeeded"]
    entry = AuditEntry.objects.get(target=f"run {run.pk} (forward)", outcome="succeeded")
    assert (entry.event, entry.kind) == ("run", "python")
    assert entry.digests == {"code": sha256_text(run.code)}
    assert audit_verify()[1] is None


def test_a_run_that_fails_records_its_end_once_with_the_reason():
    run = started("raise SystemExit(3)\n")
    assert run.status == RunStatus.FAILED
    assert ended(run) == [f"failed: {run.error}" if run.error else "failed"]
    assert audit_verify()[1] is None


def test_a_reaped_run_records_its_end_once_and_its_worker_after_it_nothing():
    with override_settings(UNDOABLE_RUN_HEARTBEAT_INTERVAL_S=0.2):
        run = started_run()
        assert runs_reap(now=timezone.now() + dt.timedelta(hours=1)) == [run.pk]
        assert runs_reap(now=timezone.now() + dt.timedelta(hours=1)) == []
        run = finished(run)  # the worker's own end loses the race: not recorded
    assert (run.status, run.error) == (RunStatus.FAILED, WORKER_LOST)
    assert ended(run) == [f"failed: {WORKER_LOST}"[:200]]
    assert audit_verify()[1] is None


def test_a_run_stopped_before_it_started_records_its_end_once():
    run = RunFactory()
    run_cancel(run=run)
    run_cancel(run=run)
    assert ended(run) == ["cancelled: Stopped before it started."]
    assert audit_verify()[1] is None
