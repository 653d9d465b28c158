"""Per-token quotas: a token bucket for request rate and a cap on runs in flight.

In-process: each web/worker process keeps its own counters, so with N processes a token may get
up to N times the configured figures. Good enough to stop a runaway agent loop; a shared (Redis)
limiter is the upgrade path for a multi-process deployment.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class QuotaExceeded(Exception):
    """The caller must wait `retry_after_s` seconds before trying again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Condition()
        self._buckets: dict[object, _Bucket] = {}
        self._active: dict[object, int] = {}

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
    def slot(self, key: object, *, limit: int) -> Iterator[None]:
        """Hold one of `key`'s `limit` concurrent slots for the duration of the block."""
        with self._lock:
            if self._active.get(key, 0) >= limit:
                raise QuotaExceeded(f"at most {limit} runs at once per token", 1)
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

    def active(self, key: object) -> int:
        with self._lock:
            return self._active.get(key, 0)

    def wait_for_active(self, key: object, count: int, timeout: float) -> bool:
        """Block until `key` has `count` runs in flight (tests and monitoring use it)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._active.get(key, 0) == count, timeout)

    def reset(self) -> None:
        with self._lock:
            self._buckets.clear()


limiter = RateLimiter()
