"""Embedded mode: execute runs on threads inside the web process, shared fairly between owners.

Not Celery's eager mode, which runs the task inside the request and so cannot stream. Each run
gets a RunCancel registered here before it is queued, so Stop works in every state.

Runs wait in one queue per owner, and start in turns: the owner with the fewest runs executing
first, round-robin among equals. UNDOABLE_RUNNER_THREADS runs execute at once, so a person alone
may use every thread. A run that started is never preempted: when every thread is taken and an
owner with nothing running has a run waiting, the pool lends that owner one more thread (at most
UNDOABLE_RUNNER_LEND lent at once), so a newcomer starts at once instead of after the first
of the busy owner's runs to end. A lent thread goes back when its run ends.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from django.conf import settings
from django.db import close_old_connections, connection

from webapp.runs.stops import RunCancel

logger = logging.getLogger(__name__)

Owner = int | None


@dataclass(frozen=True)
class Job:
    run_id: int
    owner: Owner
    token: RunCancel
    future: Future[None] = field(default_factory=Future)


class FairScheduler:
    """Which queued run starts now, if any. Not thread-safe: the runner's lock guards it.

    `threads` runs execute at once; past that, only an owner with nothing executing may start
    one more, while fewer than `lend` runs execute past `threads`.
    """

    def __init__(self, *, threads: int, lend: int) -> None:
        self._threads = threads
        self._lend = lend
        # Dict order is the round: an owner just served moves to the back.
        self._queues: dict[Owner, deque[Job]] = {}
        self._running: Counter[Owner] = Counter()
        self._busy = 0

    def push(self, job: Job) -> None:
        self._queues.setdefault(job.owner, deque()).append(job)

    def pop(self) -> Job | None:
        if not self._queues:
            return None
        # min() keeps the first of equals, i.e. the owner that has waited longest for a turn.
        owner = min(self._queues, key=lambda o: self._running[o])
        if self._busy >= self._threads and (
            self._running[owner] or self._busy >= self._threads + self._lend
        ):
            return None
        queue = self._queues.pop(owner)
        job = queue.popleft()
        if queue:
            self._queues[owner] = queue
        self._running[owner] += 1
        self._busy += 1
        return job

    def done(self, job: Job) -> None:
        self._busy -= 1
        self._running[job.owner] -= 1
        if not self._running[job.owner]:
            del self._running[job.owner]

    def take_queued(self) -> list[Job]:
        """Remove and return every job still waiting, in no particular order."""
        jobs = [job for queue in self._queues.values() for job in queue]
        self._queues.clear()
        return jobs

    def idle(self) -> bool:
        return not self._busy and not self._queues


class _Runner:
    """Threads that execute what the scheduler lets start: as many as run at once, the pool's
    `keep` of them staying when idle (an idle thread costs a stack, not a core)."""

    def __init__(self, keep: int, scheduler: FairScheduler) -> None:
        self._cond = threading.Condition()
        self._scheduler = scheduler
        self._keep = keep
        self._closed = False
        self._ready: deque[Job] = deque()  # started by the scheduler, not yet on a thread
        self._free = 0  # threads alive and not executing a job
        self._threads: set[threading.Thread] = set()

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the embedded runner is shut down")
            self._scheduler.push(job)
            self._dispatch()

    def _dispatch(self) -> None:
        """Hand every run that may start now to a thread, starting threads as needed (locked)."""
        while (job := self._scheduler.pop()) is not None:
            self._ready.append(job)
            if len(self._ready) > self._free:
                self._free += 1
                # A daemon thread: an idle one must not hold the process (shutdown() waits for
                # the runs at exit).
                thread = threading.Thread(target=self._work, name="undoable-run", daemon=True)
                self._threads.add(thread)
                thread.start()
            self._cond.notify()

    def _work(self) -> None:
        while (job := self._next()) is not None:
            try:
                if job.future.set_running_or_notify_cancel():
                    _execute(job.run_id, job.token)
                    job.future.set_result(None)
            finally:
                _drop_token(job.run_id)  # also when the Future was cancelled while queued
                with self._cond:
                    self._free += 1
                    self._scheduler.done(job)
                    self._dispatch()
                    self._cond.notify_all()  # shutdown() waits for the pool to be idle

    def _next(self) -> Job | None:
        """The next job for this thread; None when it should end (surplus or shut down)."""
        with self._cond:
            while not self._ready:
                if self._closed or len(self._threads) > self._keep:
                    self._free -= 1
                    self._threads.discard(threading.current_thread())
                    self._cond.notify_all()
                    return None
                self._cond.wait()
            self._free -= 1
            return self._ready.popleft()

    def stop(self) -> list[Job]:
        """Take no more runs and start none of those waiting; returns them (the caller ends
        them, and the running ones)."""
        with self._cond:
            self._closed = True
            queued = self._scheduler.take_queued() + list(self._ready)
            for job in self._ready:
                self._scheduler.done(job)
            self._ready.clear()
            self._cond.notify_all()
        return queued

    def shutdown(self) -> None:
        """Run what is queued, then stop the threads (as ThreadPoolExecutor.shutdown(wait=True))."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.wait_idle(None)

    def wait_idle(self, timeout: float | None) -> bool:
        """Wait until no run is queued or executing; False if some still are after `timeout`."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._scheduler.idle() and not self._ready and not self._executing(),
                timeout,
            )

    def _executing(self) -> bool:
        return len(self._threads) > self._free


_lock = threading.Lock()
_runner: _Runner | None = None
_tokens: dict[int, RunCancel] = {}
_futures: dict[int, Future[None]] = {}
_stopped_with: Callable[[int], None] | None = None  # set by stop(): fails what comes later


def _get_runner() -> _Runner:
    global _runner
    with _lock:
        if _runner is None:
            threads = settings.UNDOABLE_RUNNER_THREADS
            scheduler = FairScheduler(threads=threads, lend=settings.UNDOABLE_RUNNER_LEND)
            _runner = _Runner(threads, scheduler)
        return _runner


def submit(run_id: int, *, owner_id: int | None = None) -> Future[None]:
    """Queue run `run_id` in its owner's queue; returns a Future that completes when it has ended.

    `owner_id` is the run's query owner: runs of different owners share the threads fairly.
    """
    job = Job(run_id=run_id, owner=owner_id, token=RunCancel())
    with _lock:
        _tokens[run_id] = job.token
        _futures[run_id] = job.future
    job.future.add_done_callback(lambda _: _forget(run_id))
    try:
        _get_runner().submit(job)
    except RuntimeError:
        if _stopped_with is None:
            raise
        _fail_unstarted(job, _stopped_with)
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


def _execute(run_id: int, token: RunCancel) -> None:
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


def wait_idle(timeout: float) -> bool:
    """Wait until no run is queued or executing here; False if some still are after `timeout`."""
    with _lock:
        runner = _runner
    return runner is None or runner.wait_idle(timeout)


def stop(*, reason: str, grace_s: float, timeout_s: float, fail: Callable[[int], None]) -> bool:
    """Give the runs held here `grace_s` to end, then end the rest with `reason`: `fail(run_id)`
    records it for the queued ones, and any submitted from now on, which never start; the
    running ones have their sandboxes killed and fail with it. Waits up to `timeout_s` for them
    to end; False if some had not."""
    global _stopped_with
    runner = _get_runner()
    runner.wait_idle(grace_s)
    with _lock:
        _stopped_with = fail  # before the runner refuses submits, which then fail this way
    queued = runner.stop()
    with _lock:
        running = list(_tokens.values())  # none can start any more
    for job in queued:
        _fail_unstarted(job, fail)
    for token in running:
        token.end(reason)
    return runner.wait_idle(timeout_s)


def _fail_unstarted(job: Job, fail: Callable[[int], None]) -> None:
    _drop_token(job.run_id)
    if job.future.set_running_or_notify_cancel():
        close_old_connections()
        try:
            fail(job.run_id)
        finally:
            job.future.set_result(None)


def shutdown() -> None:
    """Wait for queued and running runs and stop the threads (tests and process exit)."""
    global _runner, _stopped_with
    with _lock:
        runner, _runner, _stopped_with = _runner, None, None
    if runner is not None:
        runner.shutdown()


atexit.register(shutdown)
