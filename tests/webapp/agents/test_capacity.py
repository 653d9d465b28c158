"""The per-token rate's defaults follow what the machine's cores can serve."""

from __future__ import annotations

import os
import uuid

import pytest
from django.test import override_settings

from tests.servers import RedisServer
from webapp.admission import capacity, gate
from webapp.admission.ratelimit import QuotaExceeded

# `make loadtest`'s stateless phase: one token, 2,000 execs as fast as the machine answers them
# (~230 runs/s on 2 cores, where the old fixed default refused 20).
LOADTEST_EXECS = 2000


@pytest.fixture(params=["process", "redis"])
def limiter_mode(request: pytest.FixtureRequest, redis_server: RedisServer):
    """The rate as each mode keeps it: in this process, or shared through the real Redis."""
    url = redis_server.url(7) if request.param == "redis" else None
    with override_settings(REDIS_URL=url, UNDOABLE_ADMISSION=request.param):
        yield request.param


@pytest.fixture
def cores(monkeypatch: pytest.MonkeyPatch):
    def set_cores(count: int) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(count)))

    return set_cores


def a_token_sends_at_once(count: int) -> int:
    """Spend `count` requests of one fresh token's rate at once; how many were refused."""
    key = f"capacity-{uuid.uuid4().hex}"
    refused = 0
    for _ in range(count):
        try:
            gate.spend_rate(key)
        except QuotaExceeded:
            refused += 1
    return refused


def test_the_default_rate_grows_with_the_usable_cores(cores):
    cores(2)
    two = capacity.token_rate()
    cores(8)
    eight = capacity.token_rate()

    assert eight == (two[0] * 4, two[1] * 4)
    assert two == (capacity.RUNS_PER_CORE_S * 60 * 2, capacity.RUNS_PER_CORE_S * 6 * 2)


def test_a_token_at_the_machines_capacity_is_not_refused_by_the_default_rate(cores, limiter_mode):
    cores(1)  # the smallest machine: still above what it can run in one window

    assert a_token_sends_at_once(LOADTEST_EXECS) == 0
    assert a_token_sends_at_once(capacity.RUNS_PER_CORE_S * capacity.RATE_WINDOW_S) == 0


@override_settings(AGENTS_RATE_PER_MINUTE=60)
def test_a_set_rate_wins_and_its_burst_is_six_seconds_of_it():
    assert capacity.token_rate() == (60, 6)
    with pytest.raises(QuotaExceeded, match="at most 60 requests per minute per token, 6 in any"):
        for _ in range(7):
            gate.spend_rate("a token with a set rate")


@pytest.mark.sabotage
def test_sabotage_with_the_old_fixed_default_the_loadtest_is_refused(
    cores, limiter_mode, monkeypatch
):
    cores(1)
    monkeypatch.setattr(gate, "token_rate", lambda: (15000, 1500))

    assert a_token_sends_at_once(LOADTEST_EXECS) > 0
