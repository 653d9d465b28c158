"""Build the status payload of a run (shared by the worker, services and the consumer).

A run that did not succeed also says why and what to do next (`failure`, `reason`,
`next_step`): the query page shows them under the console, live and after a reload.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from webapp.runs.images import run_image_payloads
from webapp.runs.models import Run, RunStatus
from webapp.runs.payloads import FailureKind, RunStatusEvent, StatusPayload
from webapp.runs.selectors import run_last_seq

logger = logging.getLogger(__name__)

# How execution._missing_message starts: a run refused before anything ran.
MISSING_CREDENTIAL = "Missing credential: "
# How services.run_start words a scope the connected service's token was not granted.
MISSING_SCOPE = "Missing scope: "

_LIMIT_NEXT_STEP = {
    "wall_time": "Make the code finish sooner (or do less per run), then run it again.",
    "cpu_time": "Make the code compute less (or do less per run), then run it again.",
    "memory": "Make the code hold less in memory at once, then run it again.",
    "output": "Make the code print less, then run it again.",
    "pids": "Make the code start fewer processes or threads, then run it again.",
    "file_size": "Make the code write smaller files, then run it again.",
}


class Failure(NamedTuple):
    kind: FailureKind | None
    reason: str  # why, in one sentence ("" for a run that succeeded or has not ended)
    next_step: str


def run_failure(run: Run) -> Failure:
    """Why a finished run did not succeed, and the next step; kind None if it did (or runs)."""
    if run.status in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SUCCEEDED):
        return Failure(None, "", "")
    if run.status == RunStatus.CANCELLED:
        return Failure("stopped", run.error or "Stopped.", "Run it again when you are ready.")
    if run.error.startswith(MISSING_CREDENTIAL):
        # Both producers (services.run_start, execution) name the credentials, then a full stop.
        names = run.error.removeprefix(MISSING_CREDENTIAL).split(".", 1)[0]
        return Failure(
            "missing_credential",
            f"{MISSING_CREDENTIAL}{names}. Nothing was run.",
            "Add it in the credentials panel (it stays in this browser), then run again.",
        )
    if run.error.startswith(MISSING_SCOPE):
        return Failure(
            "missing_scope",
            run.error.split(". ", 1)[0] + ". Nothing was run.",
            "Connect the service again with that scope in the Connections panel (it stays in "
            "this browser), then run again.",
        )
    limit = run.limit or ("output" if run.truncated else "")
    if limit or run.status == RunStatus.TIMED_OUT:
        next_step = _LIMIT_NEXT_STEP.get(limit, _LIMIT_NEXT_STEP["wall_time"])
        return Failure("limit", run.error or "Stopped: a limit was reached.", next_step)
    if run.exit_code is not None or run.signal:
        why = run.error or f"The program exited with code {run.exit_code}."
        return Failure(
            "program", why, "Read the output above, fix the code (or ask the model), run again."
        )
    return Failure(
        "system",
        run.error or "The run ended without a result.",
        f"Nothing in the code caused this. Run it again; if it keeps failing, the server log "
        f"names run {run.pk}.",
    )


def run_failure_log(run: Run) -> None:
    """One line per run that ended failed or timed out, with its id and why."""
    failure = run_failure(run)
    logger.warning(
        "run failed",
        extra={
            "run_id": run.pk,
            "status": run.status,
            "failure": failure.kind,
            "reason": failure.reason,
            "exit_code": run.exit_code,
        },
    )


def status_payload(run: Run) -> StatusPayload:
    failure = run_failure(run)
    return StatusPayload(
        type="status",
        run_id=run.pk,
        status=run.status,
        exit_code=run.exit_code,
        signal=run.signal,
        limit=run.limit or None,
        duration_ms=run.duration_ms,
        error=run.error,
        failure=failure.kind,
        reason=failure.reason,
        next_step=failure.next_step,
        truncated=run.truncated,
        last_seq=run_last_seq(run.pk),
        images=run_image_payloads(run),
    )


def status_event(run: Run) -> RunStatusEvent:
    return RunStatusEvent(type="run.status", status=status_payload(run))
