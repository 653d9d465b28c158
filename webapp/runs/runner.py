"""Embedded mode: execute runs on threads inside the web process, shared fairly between owners.

Not Celery's eager mode, which runs the task inside the request and so cannot stream. Each run
gets a CancelToken registered here before it is queued, so Stop works in every state.

Runs wait in one queue per owner. A free thread serves the owner with the fewest runs executing,
round-robin among equals: alone, a person may use every thread; once someone else has a run
waiting, that run goes before the busy person's further runs. A run that started is never
preempted, so a newcomer waits at most for the first run to end.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import Counter, deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from django.conf import settings
from django.db import close_old_connections, connection

from executor import CancelToken

logger = logging.getLogger(__name__)

Owner = int | None


@dataclass(frozen=True)
class Job:
    run_id: int
    owner: Owner
    token: CancelToken
    future: Future[None] = field(default_factory=Future)


class FairScheduler:
    """Which queued run a free thread takes. Not thread-safe: the runner's lock guards it."""

    def __init__(self) -> None:
        # Dict order is the round: an owner just served moves to the back.
        self._queues: dict[Owner, deque[Job]] = {}
        self._running: Counter[Owner] = Counter()

    def push(self, job: Job) -> None:
        self._queues.setdefault(job.owner, deque()).append(job)

    def pop(self) -> Job | None:
        if not self._queues:
            return None
        # min() keeps the first of equals, i.e. the owner that has waited longest for a turn.
        owner = min(self._queues, key=lambda o: self._running[o])
        queue = self._queues.pop(owner)
        job = queue.popleft()
        if queue:
            self._queues[owner] = queue
        self._running[owner] += 1
        return job

    def done(self, job: Job) -> None:
        self._running[job.owner] -= 1
        if not self._running[job.owner]:
            del self._running[job.owner]


class _Runner:
    def __init__(self, threads: int, scheduler: FairScheduler) -> None:
        self._cond = threading.Condition()
        self._scheduler = scheduler
        self._closed = False
        # Daemon threads, joined by shutdown() at exit: an idle one must not hold the process.
        self._threads = [
            threading.Thread(target=self._work, name=f"undoable-run-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the embedded runner is shut down")
            self._scheduler.push(job)
            self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while (job := self._scheduler.pop()) is None:
                    if self._closed:
                        return
                    self._cond.wait()
            try:
                if job.future.set_running_or_notify_cancel():
                    _execute(job.run_id, job.token)
                    job.future.set_result(None)
            finally:
                _drop_token(job.run_id)  # also when the Future was cancelled while queued
                with self._cond:
                    self._scheduler.done(job)

    def shutdown(self) -> None:
        """Run what is queued, then stop the threads (as ThreadPoolExecutor.shutdown(wait=True))."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()


_lock = threading.Lock()
_runner: _Runner | None = None
_tokens: dict[int, CancelToken] = {}
_futures: dict[int, Future[None]] = {}


def _get_runner() -> _Runner:
    global _runner
    with _lock:
        if _runner is None:
            _runner = _Runner(settings.UNDOABLE_RUNNER_THREADS, FairScheduler())
        return _runner


def submit(run_id: int, *, owner_id: int | None = None) -> Future[None]:
    """Queue run `run_id` in its owner's queue; returns a Future that completes when it has ended.

    `owner_id` is the run's query owner: runs of different owners share the threads fairly.
    """
    job = Job(run_id=run_id, owner=owner_id, token=CancelToken())
    with _lock:
        _tokens[run_id] = job.token
        _futures[run_id] = job.future
    job.future.add_done_callback(lambda _: _forget(run_id))
    _get_runner().submit(job)
    return job.future


def _forget(run_id: int) -> None:
    with _lock:
        _futures.pop(run_id, None)


def wait(run_id: int, timeout: float) -> bool:
    """Block until run `run_id` has ended on this runner; False on timeout. True if not held."""
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
    from webapp.runs.execution import run_execute

    close_old_connections()
    try:
        run_execute(run_id=run_id, cancel=token)
    except Exception:
        # run_execute records its own failures; this is the last line for bugs, so the thread
        # keeps serving and the traceback lands in the log.
        logger.exception("run crashed in the embedded runner", extra={"run_id": run_id})
    finally:
        _drop_token(run_id)  # before the Future completes: a waiter then finds no token
        connection.close()


def _drop_token(run_id: int) -> None:
    with _lock:
        _tokens.pop(run_id, None)


def shutdown() -> None:
    """Wait for queued and running runs and stop the threads (tests and process exit)."""
    global _runner
    with _lock:
        runner, _runner = _runner, None
    if runner is not None:
        runner.shutdown()


atexit.register(shutdown)
