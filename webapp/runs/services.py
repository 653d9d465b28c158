"""Writes for runs. Views, tasks and consumers call these; nothing else writes.

Running code: `run_create` + `run_start` (or `query_run` for both) enqueue a run; the worker side
(an in-process thread in the embedded mode, a Celery task in production) calls
`webapp.runs.execution.run_execute`. `run_cancel` stops it.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from webapp import lifecycle, llm
from webapp.audit.services import audit_run, audit_run_end
from webapp.connections.scopes import scopes_missing
from webapp.credentials.handoff import credentials_stash
from webapp.queries.models import Query
from webapp.runs.models import Run, RunDirection, RunStatus
from webapp.runs.publish import publish_run_event
from webapp.runs.run_backends import runner_backend
from webapp.runs.status import run_failure_log, status_event

logger = logging.getLogger(__name__)

# What the person types before a forward run of an action the model marked irreversible. The page
# asks for it; the server checks it (a request that skips the page must not skip the question).
CONFIRM_PHRASE = "run anyway"


class ConfirmationRequired(PermissionDenied):
    """A forward run of an irreversible query came without the typed confirmation.

    A PermissionDenied, so a caller that does not handle it answers 403 rather than running.
    """


class CredentialsMissing(PermissionDenied):
    """A run needs credentials the request did not carry: no Run is created, and the page says
    which (`names`) beside its Run button. A PermissionDenied, like ConfirmationRequired."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        super().__init__(
            f"Missing credential: {', '.join(names)}. Nothing was run: add it in the "
            "Credentials card (it stays in this browser), then run again."
        )


def credentials_missing(*, query: Query, credentials: dict[str, str]) -> list[str]:
    """The query's credential names the request carried no value for."""
    return [name for name in query.credential_names if not credentials.get(name)]


def run_propose_fix(*, run: Run) -> llm.Fix:
    """Ask the LLM to correct a failed run's code from its (already masked) output."""
    from webapp.runs.selectors import run_output_text

    output = run_output_text(run)
    if run.error:
        output = f"{output}\n{run.error}"
    return llm.propose_fix(code=run.code, error_output=output, language=run.language)


def run_apply_fix(*, run: Run) -> llm.Fix:
    """Ask for a fix of a failed run and put it in the query in place of the run's code.

    The replaced code (what ran and failed) is kept in `<side>_code_before_fix`, so the page
    can still show what the fix changed after a reload. On LLMError nothing changes.
    """
    fix = run_propose_fix(run=run)
    query = run.query
    side = "forward" if run.direction == RunDirection.FORWARD else "reverse"
    setattr(query, f"{side}_code", fix.code)
    setattr(query, f"{side}_code_before_fix", run.code)
    query.save(update_fields=[f"{side}_code", f"{side}_code_before_fix", "updated_at"])
    logger.info("fix applied", extra={"run_id": run.pk, "query_id": query.pk, "side": side})
    return fix


def run_create(
    *, query: Query, direction: str = "forward", wall_time_s: float | None = None
) -> Run:
    """Snapshot the query's current code into a queued Run (`wall_time_s`: a shorter wall time
    than the server's, which the worker applies, never above its cap)."""
    code = query.forward_code if direction == RunDirection.FORWARD else query.reverse_code
    return Run.objects.create(
        query=query,
        direction=direction,
        code=code,
        language=query.language,
        output_cap_bytes=settings.EXECUTOR_MAX_OUTPUT_BYTES,
        wall_time_s=wall_time_s,
    )


def run_start(
    *, run: Run, credentials: dict[str, str], grants: dict[str, str] | None = None
) -> Run:
    """Hand the run's credentials over (one-shot) and enqueue it once the transaction commits.

    Only the query's credential_names are passed on; a missing one fails the run here, before
    anything executes, with a message naming it. So does a scope the query needs that the
    connected service's token was not granted (`grants`: the receipts the browser keeps).
    """
    needed = list(run.query.credential_names)
    missing = credentials_missing(query=run.query, credentials=credentials)
    if not run.code.strip():
        return run_fail(run=run, error="There is no code to run.")
    if missing:
        return run_fail(
            run=run,
            error="Missing credential: "
            + ", ".join(missing)
            + ". Add it in the credentials panel.",
        )
    not_granted = scopes_missing(
        needed=run.query.needed_scopes, credentials=credentials, grants=grants or {}
    )
    if not_granted:
        return run_fail(
            run=run,
            error="Missing scope: "
            + "; ".join(not_granted)
            + ". Connect the service again with it in the Connections panel.",
        )
    values = {name: credentials[name] for name in needed}
    credentials_stash(run_id=run.pk, values=values)
    # Recorded before the worker may take it, so that its end is never appended first.
    audit_run(run=run, outcome="queued", secrets=values.values())
    _enqueue(run.pk, kind=run.query.kind)
    logger.info("run queued", extra={"run_id": run.pk, "runner": settings.UNDOABLE_RUNNER})
    return run


def confirmation_needed(*, query: Query, direction: str, confirm: str = "") -> bool:
    """Whether this run still needs the typed confirmation (only forward runs of irreversible
    queries do; undo runs never: refusing an undo would only make things worse)."""
    if query.reversible or direction != RunDirection.FORWARD:
        return False
    # The page compares the same way: spaces around and letter case do not matter.
    return confirm.strip().lower() != CONFIRM_PHRASE


def query_run(
    *,
    query: Query,
    direction: str = "forward",
    credentials: dict[str, str] | None = None,
    confirm: str = "",
    grants: dict[str, str] | None = None,
    wall_time_s: float | None = None,
) -> Run:
    """Create and start a run of the query's current code.

    Raises ConfirmationRequired (no Run created) for a forward run of an irreversible query
    unless `confirm` is CONFIRM_PHRASE, and CredentialsMissing (no Run created either) when a
    credential the query needs has no value.
    """
    if confirmation_needed(query=query, direction=direction, confirm=confirm):
        logger.info("irreversible run refused", extra={"query_id": query.pk})
        raise ConfirmationRequired(
            f'This action may not be undoable. Type "{CONFIRM_PHRASE}" to confirm the run.'
        )
    missing = credentials_missing(query=query, credentials=credentials or {})
    if missing:
        logger.info("run refused: credential missing", extra={"query_id": query.pk})
        raise CredentialsMissing(missing)
    return run_start(
        run=run_create(query=query, direction=direction, wall_time_s=wall_time_s),
        credentials=credentials or {},
        grants=grants,
    )


def _enqueue(run_id: int, *, kind: str) -> None:
    # After commit (the backend's submit waits for it), so the worker always finds the run.
    owner_id = Run.objects.values_list("query__owner_id", flat=True).get(pk=run_id)
    runner_backend().submit(run_id, owner_id=owner_id, kind=kind)


def run_fail(*, run: Run, error: str) -> Run:
    """End a run that never started (validation, missing credential)."""
    now = timezone.now()
    updated = lifecycle.run_move(
        run.pk,
        RunStatus.FAILED,
        from_=[RunStatus.QUEUED],
        error=error,
        started_at=now,
        finished_at=now,
    )
    run.refresh_from_db()
    if updated:
        publish_run_event(run.pk, status_event(run))
        run_failure_log(run)
        audit_run(run=run, outcome=f"failed: {error}")
    return run


def runs_stop_all(*, reason: str, grace_s: float, timeout_s: float) -> bool:
    """This server is stopping: the runs it executes get `grace_s` to end, then fail with
    `reason` (the queued ones without starting, the running ones with their sandboxes killed).
    False if some still ran `timeout_s` later."""

    def fail(run_id: int) -> None:
        run_fail(run=Run.objects.get(pk=run_id), error=reason)

    return runner_backend().stop_all(reason=reason, grace_s=grace_s, timeout_s=timeout_s, fail=fail)


def run_cancel(*, run: Run) -> Run:
    """Stop a run: a queued one ends at once; a running one gets its sandbox killed."""
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    now = timezone.now()
    with transaction.atomic():
        stopped = lifecycle.run_move(
            run.pk,
            RunStatus.CANCELLED,
            from_=[RunStatus.QUEUED],
            finished_at=now,
            started_at=now,
            error="Stopped before it started.",
        )
        if stopped:
            run.refresh_from_db()
            audit_run_end(run=run)
    if stopped:
        publish_run_event(run.pk, status_event(run))
        return run
    runner_backend().cancel(run.pk)
    logger.info("run cancel requested", extra={"run_id": run.pk})
    run.refresh_from_db()
    return run
