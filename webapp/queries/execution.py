"""The worker side of a run: the one function both runners (threads, Celery) call."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

import executor
from executor import CancelToken, ExecutorError, Limits, RunResult, RunSpec
from executor.policy.mounts import Mount
from webapp.credentials.handoff import credentials_take
from webapp.credentials.masking import mask_text
from webapp.executor_glue import ensure_executor
from webapp.queries import cancel as cancel_signal
from webapp.queries.models import Run, RunStatus
from webapp.queries.publish import publish_run_event
from webapp.queries.sink import OutputSink
from webapp.queries.status import status_event

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 5.0


def worker_name() -> str:
    # At call time: Celery's prefork children import this module before they fork.
    return f"{socket.gethostname()}:{os.getpid()}"


Finalize = Callable[[RunResult | None], None]


@dataclass
class PreparedRun:
    spec: RunSpec
    limits: Limits
    finalize: Finalize | None = None
    mounts: Sequence[Mount] = ()


def run_spec_for(run: Run, *, env: dict[str, str]) -> PreparedRun:
    """The RunSpec and limits for a run.

    Kinds other than python get their extra executor options from
    `webapp.workspaces.runs.prepare_run(run, spec, limits) -> (spec, limits, finalize, mounts)`
    when that module exists; `finalize(result or None)` is called after the run, whatever
    happened, and `mounts` go to executor.run.
    """
    spec = RunSpec(code=run.code, language=run.language, env=env)
    caps = executor.caps()
    limits = caps.narrowed(max_output_bytes=min(caps.max_output_bytes, run.output_cap_bytes))
    if run.query.kind != "python" and importlib.util.find_spec("webapp.workspaces.runs"):
        hook = importlib.import_module("webapp.workspaces.runs")
        spec, limits, finalize, mounts = hook.prepare_run(run, spec, limits)
        return PreparedRun(spec=spec, limits=limits, finalize=finalize, mounts=mounts)
    return PreparedRun(spec=spec, limits=limits)


def run_execute(*, run_id: int, cancel: CancelToken) -> None:
    """Execute a queued run: stream its output, record its result. Never leaves it running."""
    now = timezone.now()
    if not Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, started_at=now, heartbeat_at=now, worker=worker_name()
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
        ensure_executor()
        prepared = run_spec_for(run, env=credentials)
        watcher = threading.Thread(
            target=_watch,
            args=(run_id, cancel, stop_watch),
            name=f"run-{run_id}-watch",
            daemon=True,
        )
        watcher.start()
        result: RunResult | None = None
        try:
            result = executor.run(
                prepared.spec,
                limits=prepared.limits,
                on_output=lambda chunk: sink.feed(chunk.stream, chunk.text),
                cancel=cancel,
                mounts=prepared.mounts,
            )
        finally:
            stop_watch.set()
            if prepared.finalize is not None:
                prepared.finalize(result)
        sink.close()
        _finish_with_result(run, sink, result, cancelled=cancel.cancelled, limits=prepared.limits)
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
        cancel_signal.clear(run_id)


def _missing_message(missing: list[str]) -> str:
    return "Missing credential: " + ", ".join(missing) + ". Nothing was run."


def _watch(run_id: int, token: CancelToken, stop: threading.Event) -> None:
    """Poll for a Stop from another process and keep the heartbeat fresh while running."""
    close_old_connections()
    last_beat = timezone.now()
    try:
        while not stop.wait(cancel_signal.POLL_INTERVAL_S):
            if cancel_signal.requested(run_id):
                token.cancel()
                return
            now = timezone.now()
            if (now - last_beat).total_seconds() >= HEARTBEAT_INTERVAL_S:
                Run.objects.filter(pk=run_id).update(heartbeat_at=now)
                last_beat = now
    except Exception:
        logger.exception("run watcher failed", extra={"run_id": run_id})
    finally:
        from django.db import connection

        connection.close()


def _finish_with_result(
    run: Run, sink: OutputSink, result: RunResult, *, cancelled: bool, limits: Limits
) -> None:
    notes: list[str] = []
    if result.cancelled or cancelled:
        status, notes = RunStatus.CANCELLED, ["Stopped."]
    elif result.timed_out:
        status, notes = RunStatus.TIMED_OUT, [f"Timed out after {limits.wall_time_s:g} s."]
    elif result.ok:
        status = RunStatus.SUCCEEDED
    else:
        status = RunStatus.FAILED
    if result.oom_killed:
        notes.append(f"Killed: out of memory (limit {limits.memory_mib} MiB).")
    if result.truncated or sink.capped:
        notes.append(f"Output passed the cap of {run.output_cap_bytes} bytes; stopped.")
    if result.signal and status == RunStatus.FAILED and not result.oom_killed:
        notes.append(f"Killed by signal {result.signal}.")
    run.exit_code = result.exit_code
    run.signal = result.signal
    run.timed_out = result.timed_out
    run.oom_killed = result.oom_killed
    run.truncated = result.truncated or sink.capped
    _finish(run, sink, status, error=" ".join(notes))


def _finish(run: Run, sink: OutputSink, status: Any, *, error: str) -> None:
    if error:
        sink.system(error + "\n")
    run.status = status
    run.error = error
    run.output_bytes = sink.bytes_stored
    run.finished_at = timezone.now()
    run.save(
        update_fields=[
            "status",
            "error",
            "output_bytes",
            "finished_at",
            "exit_code",
            "signal",
            "timed_out",
            "oom_killed",
            "truncated",
        ]
    )
    publish_run_event(run.pk, status_event(run))
    logger.info(
        "run finished", extra={"run_id": run.pk, "status": status, "exit_code": run.exit_code}
    )
