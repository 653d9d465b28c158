"""within_quota: a run request waits for its slots and runs on one thread; a request that goes
away while it waits never starts its run."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from django.test import override_settings

from webapp.admission import gate
from webapp.admission.backends import get_admission

USER, KEY = "within-quota-user", "within-quota-token"


async def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def gone_while_waiting() -> tuple[list[str], str]:
    """A request waits for the host's one slot (held here) and goes away; the slot is freed.
    Returns what ran of the request that went away, and the answer of a request after it."""
    ran: list[str] = []

    async def scenario() -> str:
        with get_admission().admit(USER, capacity=1, wait_s=0, queue=0):
            waiting = asyncio.ensure_future(gate.within_quota(KEY, USER, lambda: ran.append("run")))
            await until(lambda: get_admission().waiting(USER) == 1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        # Admitted only once the request that went away gave its slots back.
        return await asyncio.wait_for(gate.within_quota(KEY, USER, lambda: "next"), 10)

    return ran, asyncio.run(scenario())


@override_settings(AGENTS_MAX_RUNS_PER_HOST=1)
def test_a_request_gone_while_waiting_never_starts_its_run_and_gives_its_slots_back():
    assert gone_while_waiting() == ([], "next")


@pytest.mark.sabotage
@override_settings(AGENTS_MAX_RUNS_PER_HOST=1)
def test_sabotage_unheard_the_run_of_a_request_gone_while_waiting_starts(monkeypatch):
    heard = gate._enter_then_run

    def deaf(key: object, user: object, work: Callable[[], object], gone: object) -> object:
        return heard(key, user, work, threading.Event())  # not the one the request sets

    monkeypatch.setattr(gate, "_enter_then_run", deaf)
    assert gone_while_waiting() == (["run"], "next")


@override_settings(AGENTS_MAX_RUNS_PER_HOST=1)
def test_the_wait_and_the_run_share_one_thread():
    threads: list[str] = []

    def work() -> str:
        threads.append(threading.current_thread().name)
        return "done"

    assert asyncio.run(gate.within_quota(KEY, USER, work)) == "done"
    assert threads[0].startswith("agents-run")
