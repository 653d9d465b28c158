"""Per-token quotas: request rate (429 + Retry-After) and runs in flight."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis
from django.test import override_settings

from tests.servers import RedisServer
from webapp.agents.models import ApiToken
from webapp.agents.quota import get_limiter
from webapp.agents.ratelimit import QuotaExceeded, RateLimiter
from webapp.agents.ratelimit_redis import RedisRateLimiter

pytestmark = pytest.mark.django_db(transaction=True)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_refills_at_the_configured_rate():
    clock = FakeClock()
    limiter = RateLimiter(clock=clock)
    for _ in range(3):
        limiter.take("t", per_minute=60, burst=3)
    with pytest.raises(QuotaExceeded) as denied:
        limiter.take("t", per_minute=60, burst=3)
    assert denied.value.retry_after_s == 1
    clock.now += 1.0
    limiter.take("t", per_minute=60, burst=3)


def test_tokens_have_separate_buckets():
    limiter = RateLimiter(clock=FakeClock())
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
    assert denied.json() == {"error": "rate limit exceeded"}
    assert int(denied["Retry-After"]) >= 1
    assert "X-Exit-Code" not in denied
    # Another person's token is not affected.
    assert stranger.post("/api/v1/exec", body).status_code == 200


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
    with override_settings(REDIS_URL=redis_server.url(SHARED_DB)):
        yield client
    client.flushdb()
    client.close()


@override_settings(AGENTS_RATE_BURST=2, AGENTS_RATE_PER_MINUTE=1)
def test_with_redis_a_token_gets_429_once_the_bucket_all_processes_share_is_empty(
    owner, stranger, shared_quota, redis_server
):
    key = ApiToken.objects.get(owner=owner.user).pk
    other_process = RedisRateLimiter(redis_server.url(SHARED_DB), fallback=RateLimiter())
    body = {"code": "print('ran')"}
    assert owner.post("/api/v1/exec", body).status_code == 200
    other_process.take(key, per_minute=1, burst=2)
    # This process spent one request of two: only the shared bucket can be empty.
    denied = owner.post("/api/v1/exec", body)
    assert denied.status_code == 429
    assert 50 <= int(denied["Retry-After"]) <= 60
    assert shared_quota.exists(f"undoable:quota:bucket:{key}")
    assert stranger.post("/api/v1/exec", body).status_code == 200
