"""The embedded runner shares its threads fairly between owners, on the real bwrap sandbox."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import pytest
from django.test import override_settings

from tests.factories import QueryFactory
from webapp.runs import runner, services
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.usefixtures("threads_runner")

THREADS = 4
SLEEPER = "import time\ntime.sleep(1.5)\n"


class FifoScheduler:
    """The runner before fair shares: one queue, first come first served."""

    def __init__(self) -> None:
        self._queue: deque[runner.Job] = deque()

    def push(self, job: runner.Job) -> None:
        self._queue.append(job)

    def pop(self) -> runner.Job | None:
        return self._queue.popleft() if self._queue else None

    def done(self, job: runner.Job) -> None:
        pass


@pytest.fixture(autouse=True)
def four_threads() -> Iterator[None]:
    with override_settings(UNDOABLE_RUNNER_THREADS=THREADS):
        yield


def finished(run: Run, timeout: float = 60.0) -> Run:
    assert runner.wait(run.pk, timeout), f"run {run.pk} did not finish"
    run.refresh_from_db()
    return run


def a_busy_owner_and_a_newcomer() -> tuple[list[Run], Run]:
    """Owner A queues 12 sleeping runs, then owner B one print; all of them finish."""
    busy = QueryFactory(forward_code=SLEEPER)
    sleepers = [services.query_run(query=busy) for _ in range(12)]
    newcomer = services.query_run(query=QueryFactory(forward_code="print(1)\n"))
    return [finished(run) for run in sleepers], finished(newcomer)


def test_a_newcomers_run_goes_before_a_busy_owners_queue() -> None:
    sleepers, newcomer = a_busy_owner_and_a_newcomer()

    assert newcomer.status == RunStatus.SUCCEEDED
    assert all(run.status == RunStatus.SUCCEEDED for run in sleepers)
    starts = sorted(run.started_at for run in sleepers)
    # B's run is the first one a thread takes after A's first four: it never waits for A's queue,
    # only for one of A's running runs to end (a started run is not preempted).
    assert newcomer.started_at < starts[THREADS]
    assert newcomer.finished_at < starts[2 * THREADS]


def test_an_owner_alone_uses_every_thread() -> None:
    busy = QueryFactory(forward_code=SLEEPER)
    sleepers = [finished(run) for run in [services.query_run(query=busy) for _ in range(THREADS)]]

    # All four ran at once: each started before any of them ended.
    assert max(run.started_at for run in sleepers) < min(run.finished_at for run in sleepers)


def test_the_scheduler_serves_the_owner_with_fewest_running_then_takes_turns() -> None:
    scheduler = runner.FairScheduler()
    for run_id, owner in [(1, 7), (2, 7), (3, 7), (4, 8), (5, 9), (6, 8), (7, 9)]:
        scheduler.push(runner.Job(run_id=run_id, owner=owner, token=runner.CancelToken()))

    picked = [scheduler.pop() for _ in range(7)]

    assert [job.run_id for job in picked if job] == [1, 4, 5, 2, 6, 7, 3]
    assert scheduler.pop() is None


def test_a_stopped_queued_run_ends_without_running() -> None:
    busy = QueryFactory(forward_code=SLEEPER)
    ahead = [services.query_run(query=busy) for _ in range(THREADS)]
    queued = services.query_run(query=QueryFactory(forward_code="print('never')\n"))

    services.run_cancel(run=queued)

    queued = finished(queued)
    assert queued.status == RunStatus.CANCELLED
    assert [finished(run).status for run in ahead] == [RunStatus.SUCCEEDED] * THREADS


@pytest.mark.sabotage
def test_sabotage_with_fifo_the_newcomer_waits_for_the_busy_owners_queue(monkeypatch) -> None:
    monkeypatch.setattr(runner, "FairScheduler", FifoScheduler)

    sleepers, newcomer = a_busy_owner_and_a_newcomer()

    assert newcomer.started_at > max(run.started_at for run in sleepers)
