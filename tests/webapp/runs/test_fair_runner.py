"""The embedded runner shares its threads fairly between owners, on the real bwrap sandbox."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator

import pytest
from django.test import override_settings

from tests.factories import QueryFactory
from tests.webapp.runs.waiting import wait_until
from webapp.runs import runner, services
from webapp.runs.models import Run, RunStatus
from webapp.runs.stops import RunCancel

pytestmark = pytest.mark.usefixtures("threads_runner")

THREADS = 4
SLEEPER = "import time\ntime.sleep(3)\n"


class FifoScheduler:
    """The runner before fair shares: one queue, first come first served, no thread lent."""

    def __init__(self, *, threads: int, lend: int) -> None:
        self._queue: deque[runner.Job] = deque()
        self._threads = threads
        self._busy = 0

    def push(self, job: runner.Job) -> None:
        self._queue.append(job)

    def pop(self) -> runner.Job | None:
        if not self._queue or self._busy >= self._threads:
            return None
        self._busy += 1
        return self._queue.popleft()

    def done(self, job: runner.Job) -> None:
        self._busy -= 1

    def take_queued(self) -> list[runner.Job]:
        jobs, self._queue = list(self._queue), deque()
        return jobs

    def idle(self) -> bool:
        return not self._busy and not self._queue


@pytest.fixture(autouse=True)
def four_threads() -> Iterator[None]:
    with override_settings(UNDOABLE_RUNNER_THREADS=THREADS, UNDOABLE_RUNNER_LEND=THREADS):
        yield


def finished(run: Run, timeout: float = 60.0) -> Run:
    assert runner.wait(run.pk, timeout), f"run {run.pk} did not finish"
    run.refresh_from_db()
    return run


def a_busy_owner_and_a_newcomer() -> tuple[list[Run], list[Run]]:
    """Owner A queues twice as many sleeping runs as there are threads, then owner B two
    prints; all of them finish."""
    busy = QueryFactory(forward_code=SLEEPER)
    sleepers = [services.query_run(query=busy) for _ in range(2 * THREADS)]
    newcomer = QueryFactory(forward_code="print(1)\n")
    prints = [services.query_run(query=newcomer) for _ in range(2)]
    return [finished(run) for run in sleepers], [finished(run) for run in prints]


def most_at_once(runs: list[Run]) -> int:
    """The largest number of `runs` executing at one moment."""
    edges = sorted([(run.started_at, 1) for run in runs] + [(run.finished_at, -1) for run in runs])
    at_once = peak = 0
    for _, step in edges:
        at_once += step
        peak = max(peak, at_once)
    return peak


def test_a_newcomers_run_starts_on_a_lent_thread_while_a_busy_owner_holds_them_all() -> None:
    sleepers, (first, second) = a_busy_owner_and_a_newcomer()

    assert [run.status for run in [*sleepers, first, second]] == [RunStatus.SUCCEEDED] * 10
    a_starts = sorted(run.started_at for run in sleepers)
    # B's first run started before any of A's ended: it waited for no thread to come free.
    assert first.started_at < min(run.finished_at for run in sleepers)
    # B's second run (B now holds one thread) waits its turn, which comes before A's queue.
    assert first.finished_at <= second.started_at < a_starts[THREADS]
    # A held every thread; the pool lent one more, once.
    assert most_at_once([*sleepers, first, second]) == THREADS + 1


def test_an_owner_alone_uses_every_thread_and_no_more() -> None:
    busy = QueryFactory(forward_code=SLEEPER)
    sleepers = [services.query_run(query=busy) for _ in range(THREADS + 2)]
    sleepers = [finished(run) for run in sleepers]

    assert most_at_once(sleepers) == THREADS


def test_the_scheduler_serves_the_owner_with_fewest_running_then_takes_turns() -> None:
    scheduler = runner.FairScheduler(threads=7, lend=0)
    for run_id, owner in [(1, 7), (2, 7), (3, 7), (4, 8), (5, 9), (6, 8), (7, 9)]:
        scheduler.push(runner.Job(run_id=run_id, owner=owner, token=RunCancel()))

    picked = [scheduler.pop() for _ in range(7)]

    assert [job.run_id for job in picked if job] == [1, 4, 5, 2, 6, 7, 3]
    assert scheduler.pop() is None


def test_the_scheduler_lends_one_thread_per_waiting_owner_up_to_its_cap() -> None:
    scheduler = runner.FairScheduler(threads=2, lend=2)
    jobs = {
        run_id: runner.Job(run_id=run_id, owner=owner, token=RunCancel())
        for run_id, owner in [(1, 7), (2, 7), (3, 7), (4, 8), (5, 8), (6, 9), (7, 10)]
    }
    for run_id in [1, 2, 3]:
        scheduler.push(jobs[run_id])
    assert [scheduler.pop(), scheduler.pop(), scheduler.pop()] == [jobs[1], jobs[2], None]
    for run_id in [4, 5, 6, 7]:
        scheduler.push(jobs[run_id])

    # 8 and 9 get a lent thread each, 8 only one; 10 is past the cap and waits.
    assert [scheduler.pop(), scheduler.pop(), scheduler.pop()] == [jobs[4], jobs[6], None]
    scheduler.done(jobs[1])  # three run now: still past the two threads, and 10 still waits
    assert scheduler.pop() == jobs[7]
    assert scheduler.pop() is None
    scheduler.done(jobs[2])
    scheduler.done(jobs[4])
    scheduler.done(jobs[6])  # one runs (10's): the turn goes to the owners with none running
    assert [scheduler.pop(), scheduler.pop()] == [jobs[3], jobs[5]]


def test_a_stopped_queued_run_ends_without_running() -> None:
    busy = QueryFactory(forward_code=SLEEPER)
    ahead = [services.query_run(query=busy) for _ in range(THREADS)]
    queued = services.query_run(query=busy)

    services.run_cancel(run=queued)

    queued = finished(queued)
    assert queued.status == RunStatus.CANCELLED
    assert [finished(run).status for run in ahead] == [RunStatus.SUCCEEDED] * THREADS


def test_a_stopping_server_fails_the_running_and_queued_runs_with_its_reason() -> None:
    busy = QueryFactory(forward_code=SLEEPER)
    runs = [services.query_run(query=busy) for _ in range(THREADS + 2)]
    running = Run.objects.filter(pk__in=[run.pk for run in runs], status=RunStatus.RUNNING)
    wait_until(lambda: running.count() == THREADS, what="the threads to be taken")

    assert services.runs_stop_all(reason="The server stopped.", grace_s=0, timeout_s=30)
    late = services.query_run(query=busy)

    runs = [finished(run) for run in [*runs, late]]
    assert [run.status for run in runs] == [RunStatus.FAILED] * len(runs)
    assert {run.error for run in runs} == {"The server stopped."}
    assert sum(run.signal is not None for run in runs) == THREADS  # the others never started


class ForgetfulCounter(Counter):
    """Runs per owner as a scheduler that lost count would see them: none anywhere."""

    def __getitem__(self, owner: object) -> int:
        return 0


@pytest.mark.sabotage
def test_sabotage_with_no_count_of_running_runs_a_lone_owner_is_lent_threads_too(
    monkeypatch,
) -> None:
    monkeypatch.setattr(runner, "Counter", ForgetfulCounter)
    busy = QueryFactory(forward_code=SLEEPER)
    sleepers = [services.query_run(query=busy) for _ in range(THREADS + 2)]
    sleepers = [finished(run) for run in sleepers]

    assert most_at_once(sleepers) > THREADS


@pytest.mark.sabotage
def test_sabotage_without_lending_the_newcomer_waits_for_a_busy_owners_run_to_end() -> None:
    with override_settings(UNDOABLE_RUNNER_LEND=0):
        sleepers, (first, _) = a_busy_owner_and_a_newcomer()

    assert first.started_at >= min(run.finished_at for run in sleepers)


@pytest.mark.sabotage
def test_sabotage_with_fifo_the_newcomer_waits_for_the_busy_owners_queue(monkeypatch) -> None:
    monkeypatch.setattr(runner, "FairScheduler", FifoScheduler)

    sleepers, (first, _) = a_busy_owner_and_a_newcomer()

    assert first.started_at > max(run.started_at for run in sleepers)
