"""The shared limiter against the real Redis: two limiter objects stand for two web processes."""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.servers import RedisServer
from webapp.admission.ratelimit import QuotaExceeded, RateLimiter
from webapp.admission.ratelimit_redis import RedisRateLimiter

Make = Callable[..., RedisRateLimiter]


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url(7)


@pytest.fixture
def make(redis_url: str) -> Iterator[Make]:
    """Builds limiters sharing one key prefix of their own (one per test), deleted afterwards."""
    prefix = f"undoable:quota:test-{uuid.uuid4().hex}:"
    client = redis.Redis.from_url(redis_url)

    def build(*, ttl_s: float = 60.0, url: str = redis_url) -> RedisRateLimiter:
        return RedisRateLimiter(
            url, prefix=prefix, slot_ttl_s=lambda: ttl_s, fallback=RateLimiter()
        )

    yield build
    for name in client.scan_iter(match=f"{prefix}*"):
        client.delete(name)
    client.close()


def test_two_processes_draw_on_one_rate(make: Make):
    first, second = make(), make()
    first.take(7, per_minute=60, burst=3)
    second.take(7, per_minute=60, burst=3)
    first.take(7, per_minute=60, burst=3)
    with pytest.raises(QuotaExceeded) as denied:
        second.take(7, per_minute=60, burst=3)
    assert denied.value.retry_after_s == 3  # 3 in any 3 s: the first leaves in under 3 s


def test_retry_after_is_the_time_until_the_oldest_request_leaves_the_window(make: Make):
    limiter = make()
    limiter.take(7, per_minute=1, burst=1)
    with pytest.raises(QuotaExceeded) as denied:
        make().take(7, per_minute=1, burst=1)
    assert denied.value.retry_after_s == 60


def test_tokens_have_separate_rates_and_caps(make: Make):
    limiter = make()
    limiter.take("a", per_minute=1, burst=1)
    limiter.take("b", per_minute=1, burst=1)
    with limiter.slot("a", limit=1), limiter.slot("b", limit=1):
        with pytest.raises(QuotaExceeded):
            limiter.take("a", per_minute=1, burst=1)
        assert (limiter.active("a"), limiter.active("b"), limiter.active("c")) == (1, 1, 0)


def test_two_processes_share_one_concurrency_cap(make: Make):
    first, second = make(), make()
    with first.slot(7, limit=2), second.slot(7, limit=2):
        with pytest.raises(QuotaExceeded) as denied, first.slot(7, limit=2):
            pass
        assert denied.value.retry_after_s == 1
        assert second.wait_for_active(7, 2, timeout=5)


def test_a_slot_is_released_when_its_block_ends_or_raises(make: Make):
    first, second = make(), make()
    with first.slot(7, limit=1):
        assert second.active(7) == 1
    with pytest.raises(RuntimeError), first.slot(7, limit=1):
        raise RuntimeError("the run failed")
    assert second.active(7) == 0
    with second.slot(7, limit=1):
        assert first.active(7) == 1


def test_a_slot_whose_holder_died_stops_counting_after_its_expiry(make: Make):
    dead, live = make(ttl_s=-1.0), make()
    with live.slot(7, limit=2):
        held = dead.slot(7, limit=2)
        held.__enter__()  # its process dies inside the block: `held` is never exited
        with live.slot(7, limit=2):
            assert live.active(7) == 2
            with pytest.raises(QuotaExceeded), live.slot(7, limit=2):
                pass


def test_an_idle_token_leaves_only_keys_that_expire(make: Make, redis_url: str):
    limiter = make()
    limiter.take(7, per_minute=60, burst=5)
    with limiter.slot(7, limit=1):
        client = redis.Redis.from_url(redis_url)
        ttls = [client.pttl(name) for name in client.scan_iter(match="undoable:quota:test-*")]
    assert len(ttls) == 2
    assert all(0 < ttl <= 61_000 for ttl in ttls)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_redis_falls_back_to_the_in_process_limiter(
    make: Make, caplog: pytest.LogCaptureFixture
):
    limiter = make(url=f"redis://127.0.0.1:{closed_port()}/0")
    with caplog.at_level(logging.WARNING, logger="webapp.admission.ratelimit_redis"):
        limiter.take(7, per_minute=1, burst=1)
    assert "using the in-process limiter" in caplog.text
    with pytest.raises(QuotaExceeded) as denied:
        limiter.take(7, per_minute=1, burst=1)
    assert denied.value.retry_after_s == 60
    with limiter.slot(7, limit=1):
        assert limiter.active(7) == 1
        with pytest.raises(QuotaExceeded), limiter.slot(7, limit=1):
            pass
    assert limiter.active(7) == 0


def test_a_waiter_gets_the_slot_another_process_frees(make: Make):
    first, second = make(), make()
    outcome: list[str] = []

    def waiter() -> None:
        with second.slot(7, limit=1, wait_s=30, queue=1):
            outcome.append("ran")

    with first.slot(7, limit=1):
        thread = threading.Thread(target=waiter)
        thread.start()
        assert first.wait_for_waiting(7, 1, timeout=30)
        assert outcome == []
    thread.join(30)
    assert outcome == ["ran"]
    assert (first.active(7), first.waiting(7)) == (0, 0)


def test_the_bound_on_waiters_is_shared_and_the_next_is_refused_at_once(make: Make):
    first, second, third = make(), make(), make()

    def wait_in_vain() -> None:
        with pytest.raises(QuotaExceeded), second.slot(7, limit=1, wait_s=2.0, queue=1):
            pass

    with first.slot(7, limit=1):
        waiter = threading.Thread(target=wait_in_vain)
        waiter.start()
        assert third.wait_for_waiting(7, 1, timeout=30)
        started = time.monotonic()
        with pytest.raises(QuotaExceeded) as denied, third.slot(7, limit=1, wait_s=30, queue=1):
            pass
        assert time.monotonic() - started < 1
        assert "1 waiting for a slot" in str(denied.value)
        waiter.join(30)
    assert third.waiting(7) == 0


def test_a_waiter_is_refused_at_its_deadline_and_stops_counting(make: Make):
    first, second = make(), make()
    with first.slot(7, limit=1):
        started = time.monotonic()
        with pytest.raises(QuotaExceeded) as denied, second.slot(7, limit=1, wait_s=0.3, queue=4):
            pass
        assert time.monotonic() - started >= 0.3
        assert denied.value.retry_after_s == 1
        assert "no slot came free in 0.3 s" in str(denied.value)
        assert first.waiting(7) == 0
