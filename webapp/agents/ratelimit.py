"""Per-token quotas: a token bucket for request rate and a cap on runs in flight.

A request over the concurrency cap waits for a slot before it is refused: at most `queue`
requests per token wait at once, each at most `wait_s` seconds, so a burst from one agent is
served in turn rather than bounced; past either bound it gets QuotaExceeded (429 + Retry-After).

`webapp.agents.quota.get_limiter()` picks the limiter at call time:

- Embedded default (no `REDIS_URL`): `local_limiter`, counters in this process. One process
  serves everything, so the figures hold exactly.
- `REDIS_URL` set (production, docker-compose): `webapp.agents.ratelimit_redis.RedisRateLimiter`,
  counters in Redis, so N web processes share one bucket and one concurrency cap per token.
  If Redis is down or errors, that limiter logs a warning and uses `local_limiter` for the call:
  the API keeps serving, and during the outage a token may get up to N times its quota (one
  in-process budget per web process) instead of every request failing.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol


class QuotaExceeded(Exception):
    """The caller must wait `retry_after_s` seconds before trying again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Limiter(Protocol):
    """What the API views use; both the in-process and the Redis limiter provide it."""

    def take(self, key: object, *, per_minute: float, burst: int) -> None: ...

    def slot(
        self, key: object, *, limit: int, wait_s: float = 0.0, queue: int = 0
    ) -> AbstractContextManager[None]: ...

    def active(self, key: object) -> int: ...

    def waiting(self, key: object) -> int: ...

    def wait_for_active(self, key: object, count: int, timeout: float) -> bool: ...

    def wait_for_waiting(self, key: object, count: int, timeout: float) -> bool: ...

    def reset(self) -> None: ...


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """The in-process limiter: exact for one process, per-process otherwise."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Condition()
        self._buckets: dict[object, _Bucket] = {}
        self._active: dict[object, int] = {}
        self._waiting: dict[object, int] = {}

    def take(self, key: object, *, per_minute: float, burst: int) -> None:
        """Spend one request from `key`'s bucket or raise QuotaExceeded."""
        rate = per_minute / 60.0
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(key) or _Bucket(tokens=float(burst), updated=now)
            bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
            self._buckets[key] = bucket
            if bucket.tokens < 1.0:
                wait = (1.0 - bucket.tokens) / rate if rate > 0 else 60.0
                raise QuotaExceeded("rate limit exceeded", max(1, math.ceil(wait)))
            bucket.tokens -= 1.0

    @contextmanager
    def slot(
        self, key: object, *, limit: int, wait_s: float = 0.0, queue: int = 0
    ) -> Iterator[None]:
        """Hold one of `key`'s `limit` concurrent slots for the duration of the block.

        When all are taken, wait up to `wait_s` seconds for one if fewer than `queue` others do.
        """
        with self._lock:
            if self._active.get(key, 0) >= limit:
                self._wait_for_slot(key, limit=limit, wait_s=wait_s, queue=queue)
            self._active[key] = self._active.get(key, 0) + 1
            self._lock.notify_all()
        try:
            yield
        finally:
            with self._lock:
                self._active[key] -= 1
                if not self._active[key]:
                    del self._active[key]
                self._lock.notify_all()

    def _wait_for_slot(self, key: object, *, limit: int, wait_s: float, queue: int) -> None:
        # Called holding the lock; returns holding it with a slot free, or raises QuotaExceeded.
        if wait_s <= 0 or queue <= 0:
            raise QuotaExceeded(busy_message(limit, 0), 1)
        if self._waiting.get(key, 0) >= queue:
            raise QuotaExceeded(busy_message(limit, queue), 1)
        self._waiting[key] = self._waiting.get(key, 0) + 1
        self._lock.notify_all()
        try:
            free = self._lock.wait_for(lambda: self._active.get(key, 0) < limit, wait_s)
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key]
            self._lock.notify_all()
        if not free:
            raise QuotaExceeded(busy_message(limit, queue, waited_s=wait_s), 1)

    def waiting(self, key: object) -> int:
        """How many requests of `key` wait for a slot (tests and monitoring use it)."""
        with self._lock:
            return self._waiting.get(key, 0)

    def active(self, key: object) -> int:
        """How many runs `key` has in flight."""
        with self._lock:
            return self._active.get(key, 0)

    def wait_for_active(self, key: object, count: int, timeout: float) -> bool:
        """Block until `key` has `count` runs in flight (tests and monitoring use it)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._active.get(key, 0) == count, timeout)

    def wait_for_waiting(self, key: object, count: int, timeout: float) -> bool:
        """Block until `count` requests of `key` wait for a slot (tests use it)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._waiting.get(key, 0) == count, timeout)

    def reset(self) -> None:
        """Refill every bucket (tests); slots in use stay held until their blocks exit."""
        with self._lock:
            self._buckets.clear()


def busy_message(limit: int, queue: int, *, waited_s: float | None = None) -> str:
    """The 429 text when no slot is free, saying which bound was hit."""
    if waited_s is not None:
        return f"at most {limit} runs at once per token; no slot came free in {waited_s:g} s"
    if queue:
        return f"at most {limit} runs at once per token and {queue} waiting for a slot"
    return f"at most {limit} runs at once per token"


local_limiter = RateLimiter()
