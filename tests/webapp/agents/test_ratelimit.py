"""Per-token quotas: request rate (429 + Retry-After) and runs in flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from django.test import override_settings
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from tests.fakes.clock import ManualClock
from tests.servers import RedisServer
from webapp.admission import window_storage
from webapp.admission.backends import get_limiter
from webapp.admission.ratelimit import QuotaExceeded, RateLimiter
from webapp.admission.ratelimit_redis import RedisRateLimiter
from webapp.agents.models import ApiToken

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    """The wall clock (time.time) that limits' storage and the Retry-After both read."""
    fake = ManualClock(1_000_000.0)
    monkeypatch.setattr(time, "time", fake)
    return fake


def test_a_burst_past_the_cap_waits_until_its_oldest_request_leaves_the_window(clock):
    limiter = RateLimiter()
    start = clock.now
    limiter.take("t", per_minute=60, burst=3)  # 3 in any 3 s
    clock.now = start + 0.5
    limiter.take("t", per_minute=60, burst=3)
    limiter.take("t", per_minute=60, burst=3)
    clock.now = start + 0.75
    with pytest.raises(QuotaExceeded) as denied:
        limiter.take("t", per_minute=60, burst=3)
    assert denied.value.retry_after_s == 3  # the first leaves the window after 2.25 s
    assert str(denied.value) == "at most 60 requests per minute per token, 3 in any 3 s"
    clock.now = start + 3.01
    limiter.take("t", per_minute=60, burst=3)
    with pytest.raises(QuotaExceeded) as denied:
        limiter.take("t", per_minute=60, burst=3)
    assert denied.value.retry_after_s == 1  # the next two leave at start + 3.5


def test_a_greedy_token_gets_its_burst_at_once_and_its_rate_over_a_minute(clock):
    limiter = RateLimiter()
    admitted: list[float] = []
    start = clock.now
    while clock.now < start + 60:
        try:
            limiter.take("t", per_minute=600, burst=60)
            admitted.append(clock.now - start)
        except QuotaExceeded:
            clock.now += 0.1
    assert admitted.count(0.0) == 60
    # A token bucket of that rate and burst would let 600 + 60 through in this minute.
    assert len(admitted) == 600


def test_tokens_have_separate_rates():
    limiter = RateLimiter()
    limiter.take("a", per_minute=1, burst=1)
    limiter.take("b", per_minute=1, burst=1)
    with pytest.raises(QuotaExceeded) as denied:
        limiter.take("a", per_minute=1, burst=1)
    assert denied.value.retry_after_s == 60


@override_settings(AGENTS_RATE_BURST=2, AGENTS_RATE_PER_MINUTE=1)
def test_a_token_over_its_rate_gets_429_with_retry_after_and_nothing_runs(owner, stranger):
    body = {"code": "print('ran')"}
    assert [owner.post("/api/v1/exec", body).status_code for _ in range(2)] == [200, 200]
    denied = owner.post("/api/v1/exec", body)
    assert denied.status_code == 429
    assert denied.json() == {"error": "at most 1 requests per minute per token, 2 in any 120 s"}
    assert 110 <= int(denied["Retry-After"]) <= 120
    assert "X-Exit-Code" not in denied
    # Another person's token is not affected.
    assert stranger.post("/api/v1/exec", body).status_code == 200


@pytest.mark.sabotage
@override_settings(AGENTS_RATE_BURST=2, AGENTS_RATE_PER_MINUTE=1)
def test_sabotage_with_the_rate_window_always_allowing_a_burst_past_the_cap_runs(
    owner, monkeypatch
):
    monkeypatch.setattr(MovingWindowRateLimiter, "hit", lambda self, item, *ids, cost=1: True)
    body = {"code": "print('ran')"}
    assert [owner.post("/api/v1/exec", body).status_code for _ in range(3)] == [200, 200, 200]


@override_settings(AGENTS_MAX_CONCURRENT_PER_TOKEN=1, AGENTS_SLOT_WAIT_S=0)
def test_a_token_over_its_concurrency_cap_with_no_wait_gets_429_at_once(owner):
    key = ApiToken.objects.get(owner=owner.user).pk
    slow = {"code": "import time; time.sleep(3)", "timeout_s": 5}
    first: list[int] = []
    worker = threading.Thread(
        target=lambda: first.append(owner.post("/api/v1/exec", slow).status_code)
    )
    worker.start()
    assert get_limiter().wait_for_active(key, 1, timeout=30)
    denied = owner.post("/api/v1/exec", {"code": "print(1)"})
    worker.join(30)
    assert denied.status_code == 429
    assert denied["Retry-After"] == "1"
    assert denied.json() == {"error": "at most 1 runs at once per token"}
    assert first == [200]


SHARED_DB = 8


@pytest.fixture
def shared_quota(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """The production key space in a Redis database of its own, emptied before and after;
    the settings point at it."""
    client = redis.Redis.from_url(redis_server.url(SHARED_DB))
    client.flushdb()
    with override_settings(REDIS_URL=redis_server.url(SHARED_DB), UNDOABLE_ADMISSION="redis"):
        yield client
    client.flushdb()
    client.close()


@override_settings(AGENTS_RATE_BURST=2, AGENTS_RATE_PER_MINUTE=1)
def test_with_redis_a_token_gets_429_once_the_window_all_processes_share_is_full(
    owner, stranger, shared_quota, redis_server
):
    key = ApiToken.objects.get(owner=owner.user).pk
    other_process = RedisRateLimiter(redis_server.url(SHARED_DB), fallback=RateLimiter())
    body = {"code": "print('ran')"}
    assert owner.post("/api/v1/exec", body).status_code == 200
    other_process.take(key, per_minute=1, burst=2)
    # This process spent one request of two: only the shared window can be full.
    denied = owner.post("/api/v1/exec", body)
    assert denied.status_code == 429
    assert 110 <= int(denied["Retry-After"]) <= 120
    assert list(shared_quota.scan_iter(match=f"undoable:quota:rate:*/{key}/*"))
    assert stranger.post("/api/v1/exec", body).status_code == 200


def threads_started_by_paced_hits(limiter: RateLimiter, monkeypatch: pytest.MonkeyPatch) -> int:
    """Threads started while a token sends three requests 30 ms apart (real time)."""
    started: list[threading.Thread] = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda t: (started.append(t), start(t))[1])
    for _ in range(3):
        time.sleep(0.03)
        limiter.take("paced", per_minute=600, burst=10)
    return len(started)


def test_paced_requests_start_no_thread(monkeypatch):
    assert threads_started_by_paced_hits(RateLimiter(), monkeypatch) == 0


@pytest.mark.sabotage
def test_sabotage_with_limits_memory_storage_each_paced_request_starts_a_timer(monkeypatch):
    limiter = RateLimiter()
    limiter._rate = MovingWindowRateLimiter(MemoryStorage())
    assert threads_started_by_paced_hits(limiter, monkeypatch) >= 2


SWEEP_EVERY = window_storage.SWEEP_EVERY


def keys_kept_after_many_tokens_went_quiet(clock: ManualClock) -> int:
    limiter = RateLimiter()
    for n in range(5000):
        limiter.take(f"token-{n}", per_minute=60, burst=5)  # a 5 s window
    clock.now += 60
    for _ in range(SWEEP_EVERY):
        limiter.take("busy", per_minute=6000, burst=5000)
    return limiter._rate.storage.keys()  # type: ignore[attr-defined]


def test_the_windows_of_tokens_gone_quiet_are_dropped(clock):
    assert keys_kept_after_many_tokens_went_quiet(clock) == 1


@pytest.mark.sabotage
def test_sabotage_never_sweeping_keeps_every_token_ever_seen(clock, monkeypatch):
    monkeypatch.setattr(window_storage, "SWEEP_EVERY", 10**9)
    assert keys_kept_after_many_tokens_went_quiet(clock) == 5001


def test_the_window_decides_as_limits_memory_storage_does(clock):
    """The same 2,000 requests from 3 tokens, at random moments: the same answers and the same
    Retry-After from both storages."""
    import random

    from limits import RateLimitItemPerSecond

    ours, theirs = (
        MovingWindowRateLimiter(s) for s in (window_storage.WindowStorage(), MemoryStorage())
    )
    item = RateLimitItemPerSecond(5, 10)
    draw = random.Random(18)
    for _ in range(2000):
        clock.now += draw.choice([0.0, 0.1, 0.5, 1.0, 3.0])
        key = draw.choice(["a", "b", "c"])
        assert ours.hit(item, key) == theirs.hit(item, key)
        assert ours.get_window_stats(item, key) == theirs.get_window_stats(item, key)
