"""The worker side of a run: the one function both runners (threads, Celery) call."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import redis
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone

from webapp import lifecycle
from webapp.audit.services import audit_run_end
from webapp.credentials.handoff import credentials_take
from webapp.credentials.masking import mask_text
from webapp.executor_glue import (
    CancelToken,
    ExecutorError,
    Image,
    Limits,
    RunResult,
    RunSpec,
    executor_get,
    limit_line,
)
from webapp.reliability import conf
from webapp.reliability.workers import current_worker
from webapp.runs.ended import run_ended
from webapp.runs.images import run_images_store
from webapp.runs.jobs import KindJob, run_job_for
from webapp.runs.models import Run, RunStatus
from webapp.runs.publish import publish_run_event
from webapp.runs.sink import OutputSink
from webapp.runs.status import run_failure_log, status_event
from webapp.runs.stops import STOP_POLL_INTERVAL_S, RunCancel, stop_clear, stop_requested

logger = logging.getLogger(__name__)


def run_job(run: Run, *, env: dict[str, str]) -> contextlib.AbstractContextManager[KindJob]:
    """The run's job: `.spec`, `.limits`, `.mounts` to start, `.finish(result)` after (the fs, db
    and rest kinds' come from the job sources webapp.workspaces registers: webapp.runs.jobs)."""
    spec = RunSpec(code=run.code, language=run.language, env=env)
    caps = executor_get().caps
    limits = caps.narrowed(
        max_output_bytes=min(caps.max_output_bytes, run.output_cap_bytes),
        wall_time_s=min(caps.wall_time_s, run.wall_time_s) if run.wall_time_s else None,
    )
    return run_job_for(run, spec, limits)


def run_execute(*, run_id: int, cancel: RunCancel) -> None:
    """Execute a queued run: stream its output, record its result. Never leaves it running."""
    now = timezone.now()
    if not lifecycle.run_move(
        run_id, RunStatus.RUNNING, started_at=now, heartbeat_at=now, worker=current_worker()
    ):
        logger.info("run not queued any more; skipped", extra={"run_id": run_id})
        return
    run = Run.objects.select_related("query").get(pk=run_id)
    publish_run_event(run_id, status_event(run))
    secrets: list[str] = []
    sink = OutputSink(run_id=run_id, secrets=secrets, cap_bytes=run.output_cap_bytes)
    stop_watch = threading.Event()
    try:
        credentials = credentials_take(run_id=run_id) if run.query.credential_names else {}
        secrets.extend(v for v in credentials.values() if v)
        missing = [n for n in run.query.credential_names if not credentials.get(n)]
        if missing:
            _finish(run, sink, RunStatus.FAILED, error=_missing_message(missing))
            return
        executor = executor_get()
        with run_job(run, env=credentials) as job:
            watcher = threading.Thread(
                target=_watch,
                args=(run_id, cancel, stop_watch),
                name=f"run-{run_id}-watch",
                daemon=True,
            )
            watcher.start()
            try:
                result = executor.run(
                    job.spec,
                    limits=job.limits,
                    on_output=lambda chunk: sink.feed(chunk.stream, chunk.text),
                    cancel=cancel,
                    mounts=job.mounts,
                )
            finally:
                stop_watch.set()
            job.finish(result)
        sink.close()
        _finish_with_result(run, sink, result, cancel=cancel, limits=job.limits)
    except ExecutorError as exc:
        sink.close()
        _finish(run, sink, RunStatus.FAILED, error=mask_text(str(exc), secrets))
    except Exception:
        logger.exception("run failed inside the worker", extra={"run_id": run_id})
        sink.close()
        _finish(run, sink, RunStatus.FAILED, error="Internal error while running; see server logs.")
        raise
    finally:
        stop_watch.set()
        try:
            stop_clear(run_id)
        except redis.RedisError as exc:  # the key expires on its own; the run is recorded
            logger.warning(
                "could not clear the stop key", extra={"run_id": run_id, "error": repr(exc)}
            )


def _missing_message(missing: list[str]) -> str:
    return "Missing credential: " + ", ".join(missing) + ". Nothing was run."


def _watch(run_id: int, token: CancelToken, stop: threading.Event) -> None:
    """Poll for a Stop from another process and keep the heartbeat fresh while running.

    Each pass survives Redis and database errors (a server restarting): if this loop died, or
    a Redis outage kept it from beating, the reaper would fail a run that is still executing.
    The heartbeat is tried first and on its own, so it does not depend on Redis at all. A run
    that is no longer `running` (the reaper ended it during a long database outage) has its
    sandbox killed: no program runs on for a run already reported over.
    """
    close_old_connections()
    interval_s = conf.seconds("UNDOABLE_RUN_HEARTBEAT_INTERVAL_S")
    last_beat = timezone.now()
    failing: set[str] = set()  # log the first failure of a streak, not one every pass
    try:
        while not stop.wait(STOP_POLL_INTERVAL_S):
            now = timezone.now()
            if (now - last_beat).total_seconds() >= interval_s:
                with _pass_guard(run_id, "heartbeat", failing):
                    if not _beat(run_id, now):
                        logger.warning("run ended elsewhere; stopping it", extra={"run_id": run_id})
                        token.cancel()
                        return
                    last_beat = now
            with _pass_guard(run_id, "stop check", failing):
                if stop_requested(run_id):
                    token.cancel()
                    return
    except Exception:
        logger.exception("run watcher failed", extra={"run_id": run_id})
    finally:
        connection.close()


def _beat(run_id: int, now: dt.datetime) -> bool:
    """Touch the heartbeat; False if the run is not running any more."""
    return bool(Run.objects.filter(pk=run_id, status=RunStatus.RUNNING).update(heartbeat_at=now))


@contextlib.contextmanager
def _pass_guard(run_id: int, step: str, failing: set[str]) -> Iterator[None]:
    try:
        yield
    except (redis.RedisError, DatabaseError) as exc:
        if step not in failing:
            failing.add(step)
            logger.warning(
                "run watcher step failing; retrying every pass",
                extra={"run_id": run_id, "step": step, "error": repr(exc)},
            )
        close_old_connections()  # drops a connection PostgreSQL cut: the next pass reconnects
    else:
        if step in failing:
            failing.discard(step)
            logger.info("run watcher step recovered", extra={"run_id": run_id, "step": step})


def _finish_with_result(
    run: Run, sink: OutputSink, result: RunResult, *, cancel: RunCancel, limits: Limits
) -> None:
    notes: list[str] = []
    if (result.cancelled or cancel.cancelled) and cancel.reason:
        status, notes = RunStatus.FAILED, [cancel.reason]  # the host ended it (server stopped)
    elif result.cancelled or cancel.cancelled:
        status, notes = RunStatus.CANCELLED, ["Stopped."]
    elif result.timed_out:
        status = RunStatus.TIMED_OUT
    elif result.ok:
        status = RunStatus.SUCCEEDED
    else:
        status = RunStatus.FAILED
    if result.limit is not None and status != RunStatus.CANCELLED:
        notes.append(limit_line(result.limit, limits))
    elif sink.capped:
        notes.append(f"Output passed the cap of {run.output_cap_bytes} bytes; stopped.")
    elif result.signal and status == RunStatus.FAILED and not cancel.cancelled:
        notes.append(f"Killed by signal {result.signal}.")
    run.exit_code = result.exit_code
    run.signal = result.signal
    run.timed_out = result.timed_out
    run.limit = result.limit or ""
    run.oom_killed = result.oom_killed
    run.truncated = result.truncated or sink.capped
    _finish(
        run,
        sink,
        status,
        error=" ".join(notes),
        images=result.images,
        image_notes=result.image_notes,
    )


def _finish(
    run: Run,
    sink: OutputSink,
    status: Any,
    *,
    error: str,
    images: Sequence[Image] = (),
    image_notes: Sequence[str] = (),
) -> bool:
    """Record the end of the run, only if it is still `running`; False if it was not.

    The reaper may have ended it already ("Worker lost" after a long outage of this worker's
    heartbeat): that final state was published and stands, so neither it nor the output is
    changed after the fact. The images are stored in the same transaction as the final status:
    whoever reads the run as ended also finds its images.
    """
    if Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).exists():
        # Why an image the run made is not shown: one line per cap that left one out.
        for line in image_notes:
            sink.system(line + "\n")
        if error:
            sink.system(error + "\n")
    run.error = error
    run.output_bytes = sink.bytes_stored
    run.finished_at = timezone.now()
    fields = [
        "error",
        "output_bytes",
        "finished_at",
        "exit_code",
        "signal",
        "limit",
        "timed_out",
        "oom_killed",
        "truncated",
    ]
    with transaction.atomic():
        updated = lifecycle.run_move(
            run, status, from_=[RunStatus.RUNNING], **{n: getattr(run, n) for n in fields}
        )
        if updated:
            run_images_store(run=run, images=images)
            audit_run_end(run=run)
    if not updated:
        run.refresh_from_db()
        logger.warning(
            "run already ended elsewhere; its result is dropped",
            extra={"run_id": run.pk, "status": run.status, "dropped_status": status},
        )
        return False
    publish_run_event(run.pk, status_event(run))
    run_ended(run)
    if status in (RunStatus.FAILED, RunStatus.TIMED_OUT):
        run_failure_log(run)
    else:
        logger.info(
            "run finished", extra={"run_id": run.pk, "status": status, "exit_code": run.exit_code}
        )
    return True
