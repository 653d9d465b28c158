"""The bwrap warm pool's refill: deferred while a pooled run is in flight and just after its
result, never when empty.

The pool's sandboxes are stand-ins here (what WarmPool calls on them: wait_ready, destroy,
started_at); real sandboxes in the pool are exercised by every bwrap backend test.
"""

from __future__ import annotations

import threading
import time

import pytest

from executor.linux import pool as pool_module
from executor.linux.pool import WarmPool

WAIT_S = 5.0


class FakeSandbox:
    def __init__(self) -> None:
        self.started_at = time.monotonic()
        self.destroyed = False
        self.dead = False

    def wait_ready(self, timeout_s: float) -> None:
        pass

    def waiting(self) -> bool:
        return not self.dead

    def destroy(self, *, exiting: bool = False) -> None:
        self.destroyed = True


class CountedStarts:
    def __init__(self) -> None:
        self.count = 0
        self.cond = threading.Condition()

    def __call__(self) -> FakeSandbox:
        with self.cond:
            self.count += 1
            self.cond.notify_all()
        return FakeSandbox()

    def reach(self, count: int, timeout_s: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.count >= count, timeout_s)


@pytest.fixture
def long_defer(monkeypatch):
    # Far longer than the test waits: a refill that starts before done() was not deferred.
    monkeypatch.setattr(pool_module, "REFILL_DEFER_S", 60.0)


def full_pool(size: int) -> tuple[WarmPool, CountedStarts]:
    starts = CountedStarts()
    pool = WarmPool(starts, size, max_idle_s=300.0)
    assert pool.wait_full(WAIT_S)
    return pool, starts


def test_the_refill_waits_for_the_run_in_flight_then_starts(long_defer):
    pool, starts = full_pool(2)
    try:
        assert pool.take() is not None
        assert not starts.reach(3, 0.3), "refilled while the run was in flight"
        pool.done()
        assert starts.reach(3, WAIT_S)
        assert pool.wait_full(WAIT_S)
    finally:
        pool.close()


def test_an_empty_pool_refills_at_once_even_with_runs_in_flight(long_defer):
    pool, starts = full_pool(1)
    try:
        assert pool.take() is not None  # in flight, and nothing left ready
        assert starts.reach(2, WAIT_S)
        assert pool.wait_full(WAIT_S)
    finally:
        pool.done()
        pool.close()


def test_the_deferral_is_bounded(monkeypatch):
    monkeypatch.setattr(pool_module, "REFILL_DEFER_S", 0.2)
    pool, starts = full_pool(2)
    try:
        assert pool.take() is not None  # never given back
        assert starts.reach(3, WAIT_S)
    finally:
        pool.close()


def test_the_refill_waits_a_moment_after_the_result_then_starts(monkeypatch):
    monkeypatch.setattr(pool_module, "REFILL_SETTLE_S", 0.5)
    pool, starts = full_pool(2)
    try:
        assert pool.take() is not None
        pool.done()
        assert not starts.reach(3, 0.3), "refilled before the result's reply could go out"
        assert starts.reach(3, WAIT_S)
    finally:
        pool.close()


def test_a_pooled_sandbox_that_died_is_never_handed_out():
    starts = CountedStarts()
    pool = WarmPool(starts, 2, max_idle_s=60)
    try:
        assert pool.wait_full(WAIT_S)
        first, second = list(pool._ready)
        first.dead = True  # its processes were killed while it waited
        assert pool.take() is second
        assert first.destroyed
        pool.done()
    finally:
        pool.close()
