"""Build the status payload of a run (shared by the worker, services and the consumer)."""

from __future__ import annotations

from webapp.queries.models import Run
from webapp.queries.payloads import RunStatusEvent, StatusPayload
from webapp.queries.selectors import run_last_seq


def status_payload(run: Run) -> StatusPayload:
    return StatusPayload(
        type="status",
        run_id=run.pk,
        status=run.status,
        exit_code=run.exit_code,
        signal=run.signal,
        limit=run.limit or None,
        duration_ms=run.duration_ms,
        error=run.error,
        truncated=run.truncated,
        last_seq=run_last_seq(run.pk),
    )


def status_event(run: Run) -> RunStatusEvent:
    return RunStatusEvent(type="run.status", status=status_payload(run))
