"""The shared limiter: per-token quotas in Redis, so every web process draws on one budget.

Keys (all under `undoable:quota:`, each with a TTL so an idle token leaves nothing behind):

- `bucket:<key>`: a hash {tokens, updated}; one Lua script refills and spends it atomically,
  reading the clock with Redis' TIME so processes whose clocks disagree still agree on the rate.
  It expires once the bucket would be full again (a missing bucket is a full one).
- `slots:<key>`: a sorted set of slot ids scored by their expiry (Redis ms). A Lua script drops
  expired ids, counts and adds in one step; leaving the block removes the id. A process that
  dies holding a slot cannot release it, so every slot expires after the longest a run may take
  (EXECUTOR_WALL_TIME_S + a margin for sandbox start-up and queueing on the exec thread pool).

Cost: one round trip for `take`, one to acquire a slot, one to release it.

Redis down or erroring: the request is never refused because of the limiter. The call logs a
warning and uses the in-process limiter instead, and for the next few seconds calls skip Redis
(so an outage costs one connect timeout per few seconds, not one per request). Trade-off: while
Redis is away each process enforces the quota on its own, so a token may get N times its quota
across N processes, as before shared limits existed. A slot whose release fails expires by itself.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache

import redis
from redis.commands.core import Script

from webapp.agents.ratelimit import QuotaExceeded, RateLimiter, local_limiter
from webapp.redis_client import redis_client

logger = logging.getLogger(__name__)

PREFIX = "undoable:quota:"
SLOT_MARGIN_S = 60.0
# After a failure, calls use the in-process limiter without trying Redis for this long.
BACKOFF_S = 5.0

# KEYS[1] bucket hash; ARGV: refill rate (tokens per ms), burst. Returns 0 when a token was
# spent, else the ms until one is available.
_TAKE = """
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = tonumber(state[1]) or burst
local updated = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - updated) * rate)
local wait = 0
if tokens < 1 then wait = math.ceil((1 - tokens) / rate) else tokens = tokens - 1 end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'updated', now)
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate) + 1000)
return wait
"""

# KEYS[1] slots zset; ARGV: limit, slot lifetime in ms (may be <= 0 in tests), slot id.
# Returns 1 when the slot was taken, 0 when the cap is reached.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local keep = tonumber(last[2]) - now
if keep > 0 then redis.call('PEXPIRE', KEYS[1], keep) else redis.call('DEL', KEYS[1]) end
return 1
"""

# KEYS[1] slots zset. Returns the number of slots not yet expired.
_ACTIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
"""


def default_slot_ttl_s() -> float:
    """The longest a run may hold a slot: the server's wall-time cap plus a margin."""
    from webapp.executor_glue import server_caps

    return server_caps().wall_time_s + SLOT_MARGIN_S


@lru_cache(maxsize=8)
def _scripts_for(url: str) -> tuple[Script, Script, Script]:
    # Script objects call EVALSHA (one round trip) and load the script on NOSCRIPT.
    client = redis_client(url)
    return (
        client.register_script(_TAKE),
        client.register_script(_ACQUIRE),
        client.register_script(_ACTIVE),
    )


class RedisRateLimiter:
    """The RateLimiter interface over Redis; see the module docstring for keys and fallback."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = PREFIX,
        slot_ttl_s: Callable[[], float] = default_slot_ttl_s,
        fallback: RateLimiter = local_limiter,
    ) -> None:
        self._url = url
        self._prefix = prefix
        self._slot_ttl_s = slot_ttl_s
        self._fallback = fallback
        self._skip_until = 0.0
        # Wakes wait_for_active when this process takes or frees a slot; others are polled.
        self._changed = threading.Condition()

    def take(self, key: object, *, per_minute: float, burst: int) -> None:
        """Spend one request from `key`'s shared bucket or raise QuotaExceeded."""
        if per_minute <= 0:
            raise ValueError("per_minute must be positive")
        if not self._redis_ok():
            return self._fallback.take(key, per_minute=per_minute, burst=burst)
        take = _scripts_for(self._url)[0]
        try:
            wait_ms = int(take(keys=[self._key("bucket", key)], args=[per_minute / 60000, burst]))
        except redis.RedisError as exc:
            self._failed("take", exc)
            return self._fallback.take(key, per_minute=per_minute, burst=burst)
        if wait_ms > 0:
            raise QuotaExceeded("rate limit exceeded", max(1, math.ceil(wait_ms / 1000)))

    @contextmanager
    def slot(self, key: object, *, limit: int) -> Iterator[None]:
        """Hold one of `key`'s `limit` shared concurrent slots for the duration of the block."""
        slots_key = self._key("slots", key)
        slot_id = self._acquire(slots_key, limit)
        if slot_id is None:
            with self._fallback.slot(key, limit=limit):
                yield
            return
        self._notify()
        try:
            yield
        finally:
            try:
                redis_client(self._url).zrem(slots_key, slot_id)
            except redis.RedisError as exc:  # it expires on its own
                self._failed("release", exc)
            self._notify()

    def active(self, key: object) -> int:
        """Runs `key` has in flight across processes (plus any held here during an outage)."""
        held_here = self._fallback.active(key)
        if not self._redis_ok():
            return held_here
        try:
            return int(_scripts_for(self._url)[2](keys=[self._key("slots", key)])) + held_here
        except redis.RedisError as exc:
            self._failed("active", exc)
            return held_here

    def wait_for_active(self, key: object, count: int, timeout: float) -> bool:
        """Block until `key` has `count` runs in flight (tests and monitoring use it)."""
        deadline = time.monotonic() + timeout
        while self.active(key) != count:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._changed:
                # Another process's slots only show up in Redis: look again every 50 ms.
                self._changed.wait(min(left, 0.05))
        return True

    def reset(self) -> None:
        """Forget every bucket and slot under this limiter's prefix (tests)."""
        self._fallback.reset()
        client = redis_client(self._url)
        for name in client.scan_iter(match=f"{self._prefix}bucket:*"):
            client.delete(name)
        for name in client.scan_iter(match=f"{self._prefix}slots:*"):
            client.delete(name)

    def _acquire(self, slots_key: str, limit: int) -> str | None:
        """A new slot id, None when Redis cannot be used, or QuotaExceeded when at the cap."""
        if not self._redis_ok():
            return None
        slot_id = uuid.uuid4().hex
        ttl_ms = int(self._slot_ttl_s() * 1000)
        try:
            taken = _scripts_for(self._url)[1](keys=[slots_key], args=[limit, ttl_ms, slot_id])
        except redis.RedisError as exc:
            self._failed("slot", exc)
            return None
        if not taken:
            raise QuotaExceeded(f"at most {limit} runs at once per token", 1)
        return slot_id

    def _key(self, kind: str, key: object) -> str:
        return f"{self._prefix}{kind}:{key}"

    def _redis_ok(self) -> bool:
        return time.monotonic() >= self._skip_until

    def _failed(self, operation: str, exc: redis.RedisError) -> None:
        self._skip_until = time.monotonic() + BACKOFF_S
        logger.warning(
            "quota limiter: Redis failed, using the in-process limiter",
            extra={"operation": operation, "error": repr(exc), "backoff_s": BACKOFF_S},
        )

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()


@lru_cache(maxsize=8)
def redis_limiter_for(url: str) -> RedisRateLimiter:
    """The process-wide limiter for Redis at `url` (one per URL, so its back-off state lasts)."""
    return RedisRateLimiter(url)
