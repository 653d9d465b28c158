"""The query page's rehearsal as a background job, on the runner the page's runs use: a thread
pool in the web process in the embedded mode, a Celery task on the kinds queue under Celery.

The request only checks the query can be rehearsed, hands the credentials over and answers; the
job's state waits in Django's cache (shared with the workers under Celery), the verdict on the
action (webapp.actions.rehearsals). Credentials travel as a run's do (webapp.credentials.handoff:
a short-lived key read once and deleted), never in the task's message. A job with no verdict
UNDOABLE_REHEARSAL_WAIT_S after it was asked for is reported as failed, so the page never waits
forever on a worker that died.
"""

from __future__ import annotations

import atexit
import logging
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction

from webapp.actions.rehearsals import (
    RehearsalRefused,
    action_rehearse,
    rehearsal_for,
    rehearsal_ready,
)
from webapp.celery import app
from webapp.credentials.handoff import credentials_stash, credentials_take
from webapp.credentials.masking import mask_text
from webapp.queries.models import Query
from webapp.runs.run_backends import run_queue, runner_backend

logger = logging.getLogger(__name__)

REHEARSING, FAILED, DONE, NONE = "rehearsing", "failed", "done", "none"

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_futures: set[Future[None]] = set()


def rehearsal_submit(*, query: Query, credentials: dict[str, str]) -> dict[str, Any]:
    """Start rehearsing the query's saved code in the background and return its state at once.
    RehearsalRefused (400) when it cannot be rehearsed; nothing is started then. A rehearsal
    of the query still running is not started again: its state is returned."""
    rehearsal_ready(query, credentials)
    now = rehearsal_state(query)
    if now["state"] == REHEARSING:
        return now
    job = secrets.token_hex(16)
    cache.set(_state_key(query.pk), _rehearsing(job), timeout=_kept_s())
    credentials_stash(run_id=_handoff_id(job), values=credentials)
    query_id, kind = query.pk, query.kind
    if runner_backend().out_of_process:
        transaction.on_commit(
            lambda: rehearse_query.apply_async((query_id, job), queue=run_queue(kind))
        )
    else:
        transaction.on_commit(lambda: _on_thread(query_id, job))
    logger.info("query rehearsal queued", extra={"query_id": query_id})
    return rehearsal_state(query)


def rehearsal_state(query: Query) -> dict[str, Any]:
    """{"state": "rehearsing" | "failed" | "done" | "none", ...}: "failed" carries `error`,
    "done" the last `verdict` (stale once the code changed), "none" nothing yet. A job older
    than UNDOABLE_REHEARSAL_WAIT_S is "failed"."""
    job = cache.get(_state_key(query.pk))
    if job and job["state"] == REHEARSING:
        if time.time() - job["since"] <= _wait_s():
            return {"state": REHEARSING, "wait_s": _wait_s()}
        return {
            "state": FAILED,
            "error": f"No verdict within UNDOABLE_REHEARSAL_WAIT_S={_wait_s()} s: the worker "
            "may have stopped. Rehearse again.",
        }
    if job and job["state"] == FAILED:
        return {"state": FAILED, "error": job["error"]}
    verdict = rehearsal_for(query)
    return {"state": DONE, "verdict": verdict} if verdict else {"state": NONE}


# Registered on the project's app, as webapp.runs.tasks' are; webapp.actions.tasks imports it
# so that a worker's autodiscovery finds it. No late ack: a worker that dies mid-rehearsal has
# taken the credentials already, so a second delivery could not rehearse; the page reports the
# job failed once UNDOABLE_REHEARSAL_WAIT_S passes.
@app.task(name="actions.rehearse_query", ignore_result=True)
def rehearse_query(query_id: int, job: str) -> None:
    """Job `job` on a Celery worker: ids only, the credentials wait in the handoff."""
    rehearsal_execute(query_id, job)


def rehearsal_execute(query_id: int, job: str) -> None:
    """Run job `job` (on a worker thread or a Celery worker) and record how it ended."""
    credentials = credentials_take(run_id=_handoff_id(job))
    error = ""
    try:
        query = Query.objects.get(pk=query_id)
        action_rehearse(query=query, credentials=credentials)
    except Query.DoesNotExist:
        error = "The query was deleted before its rehearsal ran."
    except RehearsalRefused as exc:
        error = f"Could not rehearse: {exc.message}"
    except Exception as exc:
        logger.exception("query rehearsal failed", extra={"query_id": query_id})
        detail = mask_text(str(exc), [value for value in credentials.values() if value])
        error = f"The rehearsal failed: {type(exc).__name__}: {detail}"
    key = _state_key(query_id)
    if (cache.get(key) or {}).get("job") != job:
        return  # a newer rehearsal was asked for meanwhile: its state is the one to show
    if error:
        cache.set(key, {"state": FAILED, "job": job, "error": error}, timeout=_kept_s())
    else:
        cache.delete(key)  # the verdict is on the action now


def rehearsals_wait(timeout: float) -> bool:
    """Wait for the embedded pool's rehearsals to end (tests and shutdown); False on timeout."""
    _done, pending = futures_wait(list(_futures), timeout=timeout)
    return not pending


def _on_thread(query_id: int, job: str) -> None:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.UNDOABLE_RUNNER_THREADS, thread_name_prefix="rehearsal"
            )
            atexit.register(_pool.shutdown, wait=False, cancel_futures=True)
        future = _pool.submit(_execute_and_close, query_id, job)
    _futures.add(future)
    future.add_done_callback(_futures.discard)


def _execute_and_close(query_id: int, job: str) -> None:
    try:
        rehearsal_execute(query_id, job)
    finally:
        connection.close()  # this thread's own connection; the pool's threads outlive the job


def _rehearsing(job: str) -> dict[str, Any]:
    return {"state": REHEARSING, "job": job, "since": time.time()}


def _state_key(query_id: int) -> str:
    return f"rehearsal-job:{query_id}"


def _handoff_id(job: str) -> str:
    return f"rehearsal-{job}"


def _wait_s() -> int:
    return int(settings.UNDOABLE_REHEARSAL_WAIT_S)


def _kept_s() -> int:
    # Past the wait, so that a lost job is reported failed for a while before it is forgotten.
    return 2 * _wait_s() + 60
