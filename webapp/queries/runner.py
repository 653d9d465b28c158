"""Embedded mode: execute runs on a thread pool inside the web process.

Not Celery's eager mode, which runs the task inside the request and so cannot stream. Each run
gets a CancelToken registered here before it is queued, so Stop works in every state.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings
from django.db import close_old_connections, connection

from executor import CancelToken

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_tokens: dict[int, CancelToken] = {}
_futures: dict[int, Future[None]] = {}


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.RUNNER_THREADS, thread_name_prefix="undoable-run"
            )
        return _pool


def submit(run_id: int) -> Future[None]:
    """Queue run `run_id` on the pool; returns a Future that completes when the run has ended."""
    token = CancelToken()
    with _lock:
        _tokens[run_id] = token
    future = _get_pool().submit(_execute, run_id, token)
    with _lock:
        _futures[run_id] = future
    future.add_done_callback(lambda _: _forget(run_id))
    return future


def _forget(run_id: int) -> None:
    with _lock:
        _futures.pop(run_id, None)


def wait(run_id: int, timeout: float) -> bool:
    """Block until run `run_id` has ended on this pool; False on timeout. True if not held."""
    with _lock:
        future = _futures.get(run_id)
    if future is None:
        return True
    try:
        future.result(timeout=timeout)
    except TimeoutError:
        return False
    return True


def cancel(run_id: int) -> bool:
    """Cancel the run's token (kills its sandbox); False if this process does not hold it."""
    with _lock:
        token = _tokens.get(run_id)
    if token is None:
        return False
    token.cancel()
    return True


def _execute(run_id: int, token: CancelToken) -> None:
    from webapp.queries.execution import run_execute

    close_old_connections()
    try:
        run_execute(run_id=run_id, cancel=token)
    except Exception:
        # run_execute records its own failures; this is the last line for bugs, so the thread
        # pool keeps serving and the traceback lands in the log.
        logger.exception("run crashed in the embedded runner", extra={"run_id": run_id})
    finally:
        with _lock:
            _tokens.pop(run_id, None)
        connection.close()


def shutdown() -> None:
    """Wait for running runs and stop the pool (tests and process exit)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True)
