"""The Docker warm pool's refill policy, with starts we gate by hand (no engine needed).

A live request comes first: no refill starts while a request starts a container of its own,
and a request that finds the pool empty waits for a refill already under way instead of
starting another container beside it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from executor.backends.docker.pool import SandboxContainer, WarmPool

WAIT_S = 5.0


class GatedStarts:
    """A pool's `start`: each call is counted, then waits until the test lets it finish."""

    def __init__(self) -> None:
        self.begun = 0
        self.cond = threading.Condition()
        self.allowed = 0
        self.fail = False
        self.sockets: list[socket.socket] = []
        self.pools: list[WarmPool] = []

    def __call__(self) -> SandboxContainer:
        with self.cond:
            self.begun += 1
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.allowed > 0, WAIT_S)
            self.allowed -= 1
            if self.fail:
                raise OSError("engine restarting")
            ours, theirs = socket.socketpair()
            self.sockets += [ours, theirs]
        return SandboxContainer(id=f"c{self.begun}", sock=ours, handle=theirs)

    def finish(self, count: int = 1) -> None:
        with self.cond:
            self.allowed += count
            self.cond.notify_all()

    def wait_begun(self, count: int) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.begun >= count, WAIT_S)


@pytest.fixture
def starts() -> Iterator[GatedStarts]:
    gated = GatedStarts()
    yield gated
    gated.finish(100)
    for pool in gated.pools:
        pool.close()
    for sock in gated.sockets:
        sock.close()


def make_pool(starts: GatedStarts, size: int) -> WarmPool:
    pool = WarmPool(size=size, start=starts, discard=lambda c: c.close(), fillers=1)
    starts.pools.append(pool)  # closed by the fixture, once every start may finish
    return pool


def test_a_request_takes_a_ready_container_and_the_pool_refills(starts):
    pool = make_pool(starts, size=1)
    starts.finish()
    assert pool.wait_ready(WAIT_S)
    container = pool.take(timeout=WAIT_S)
    assert container is not None and container.id == "c1"
    assert starts.wait_begun(2)  # the refill


def test_a_request_waits_for_a_refill_under_way_rather_than_starting_another(starts):
    pool = make_pool(starts, size=1)
    assert starts.wait_begun(1)  # the filler's start, not finished yet
    taken: list[SandboxContainer | None] = []
    taker = threading.Thread(target=lambda: taken.append(pool.take(timeout=WAIT_S)))
    taker.start()
    starts.finish()
    taker.join(WAIT_S)
    assert taken and taken[0] is not None and taken[0].id == "c1"


def test_a_request_with_no_refill_to_wait_for_is_told_to_start_its_own(starts):
    pool = make_pool(starts, size=1)
    assert starts.wait_begun(1)
    waiting = threading.Thread(target=lambda: pool.take(timeout=WAIT_S))
    waiting.start()  # claims the one start under way
    try:
        with pool._cond:
            assert pool._cond.wait_for(lambda: pool._claims == 1, WAIT_S)
        assert pool.take(timeout=WAIT_S) is None
    finally:
        starts.finish()
        waiting.join(WAIT_S)


def test_no_refill_starts_while_a_request_starts_its_own_container(starts):
    pool = make_pool(starts, size=1)
    starts.finish()
    assert pool.wait_ready(WAIT_S)
    starts.finish()  # nothing would stop a refill from finishing at once
    with pool.live():
        assert pool.take(timeout=WAIT_S) is not None
        # A negative: the take woke the filler, which must not start in this window.
        with starts.cond:
            assert not starts.cond.wait_for(lambda: starts.begun > 1, 0.3)
    assert pool.wait_ready(WAIT_S)  # and refills once the request's start is done
    assert starts.begun == 2


def test_a_failed_refill_sends_its_waiting_request_to_start_its_own(starts):
    pool = make_pool(starts, size=1)
    assert starts.wait_begun(1)
    starts.fail = True
    taken: list[SandboxContainer | None] = []
    taker = threading.Thread(target=lambda: taken.append(pool.take(timeout=WAIT_S)))
    taker.start()
    starts.finish()
    taker.join(WAIT_S)
    assert taken == [None]
