"""Two writers move one row at the same moment, many rounds, each from its own thread and
database connection: exactly one wins each round and the row holds the winner's state.

The writers are the calls production makes (the db holder's timeout claim against a Keep or a
Discard, the run reaper against the worker's result, a rest action's Keep against its token's
revocation). The sabotage swaps the lifecycle's
conditional UPDATE for a read-then-write, with a barrier so both writers read before either
writes: then both "win", which is what these tests must catch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.apps import apps
from django.db import connection
from django.utils import timezone

from tests.factories import QueryFactory, RunFactory
from tests.webapp.lifecycle_writes import read_then_write
from webapp import lifecycle
from webapp.actions.models import Action
from webapp.runs.models import RunStatus
from webapp.runs.reaper import WORKER_LOST, _end
from webapp.workspaces.db_runs import _timeout_claim
from webapp.workspaces.models import ChangeStatus, PendingChange

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 25
Writer = Callable[[int], bool]


def race(pk: int, first: Writer, second: Writer) -> list[bool]:
    """Both writers started together on row `pk`; whether each won."""
    start = threading.Barrier(2)

    def write(writer: Writer) -> bool:
        start.wait()
        try:
            return writer(pk)
        finally:
            connection.close()  # each thread's own connection

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(write, (first, second)))


def pending_change() -> int:
    run = RunFactory(query=QueryFactory(kind="db"), status=RunStatus.SUCCEEDED)
    return PendingChange.objects.create(run=run, kind="db", status=ChangeStatus.PENDING).pk


def running_run() -> int:
    return RunFactory(status=RunStatus.RUNNING, started_at=timezone.now()).pk


def keep(pk: int) -> bool:
    """What a Keep of a db change writes (webapp.workspaces.services._decide)."""
    return lifecycle.change_move(pk, ChangeStatus.KEEP_REQUESTED, from_=[ChangeStatus.PENDING])


def discard(pk: int) -> bool:
    return lifecycle.change_move(pk, ChangeStatus.DISCARD_REQUESTED, from_=[ChangeStatus.PENDING])


def timeout(pk: int) -> bool:
    """The db holder past its deadline (webapp.workspaces.db_runs)."""
    return _timeout_claim(pk) == "timeout"


def worker_result(pk: int) -> bool:
    """What the worker's _finish writes for a run that succeeded."""
    return lifecycle.run_move(
        pk, RunStatus.SUCCEEDED, from_=[RunStatus.RUNNING], finished_at=timezone.now()
    )


def reaper(pk: int) -> bool:
    later = timezone.now() + timedelta(hours=1)
    return _end(pk, RunStatus.RUNNING, WORKER_LOST, timezone.now(), stale_before=later)


def rest_action() -> int:
    query = QueryFactory(kind="rest")
    RunFactory(query=query, status=RunStatus.SUCCEEDED, finished_at=timezone.now())
    return Action.objects.create(query=query, owner=query.owner).pk


def rest_keep(pk: int) -> bool:
    now = timezone.now()
    return lifecycle.rest_action_keep(pk, now=now, deadline=now + timedelta(hours=1))


def revoke(pk: int) -> bool:
    return lifecycle.action_token_revoked(pk, now=timezone.now())


def rest_ending(pk: int) -> str:
    action = Action.objects.get(pk=pk)
    ended = [
        word for word, at in (("kept", action.kept_at), ("revoked", action.token_revoked_at)) if at
    ]
    assert len(ended) == 1, ended
    return ended[0]


def change_status(pk: int) -> str:
    return PendingChange.objects.values_list("status", flat=True).get(pk=pk)


RACES = {
    "keep-discard": (
        pending_change,
        keep,
        discard,
        change_status,
        ("keep_requested", "discard_requested"),
    ),
    "keep-timeout": (
        pending_change,
        keep,
        timeout,
        change_status,
        ("keep_requested", "discard_requested"),
    ),
    "discard-timeout": (
        pending_change,
        discard,
        timeout,
        change_status,
        ("discard_requested",) * 2,
    ),
    "rest-keep-revoke": (rest_action, rest_keep, revoke, rest_ending, ("kept", "revoked")),
    "worker-reaper": (
        running_run,
        worker_result,
        reaper,
        lambda pk: apps.get_model("runs.Run").objects.values_list("status", flat=True).get(pk=pk),
        ("succeeded", "failed"),
    ),
}


@pytest.mark.parametrize("name", RACES)
def test_two_writers_at_once_have_exactly_one_winner(name):
    make, first, second, read, outcomes = RACES[name]
    for _ in range(ROUNDS):
        pk = make()
        won = race(pk, first, second)
        assert won.count(True) == 1, won
        assert read(pk) == outcomes[won.index(True)]


@pytest.mark.sabotage
@pytest.mark.parametrize("name", ["keep-discard", "keep-timeout", "worker-reaper"])
def test_sabotage_without_the_conditional_update_both_writers_win(name, monkeypatch):
    monkeypatch.setattr(lifecycle, "move", read_then_write(threading.Barrier(2)))
    make, first, second, _, _ = RACES[name]
    assert race(make(), first, second) == [True, True]
