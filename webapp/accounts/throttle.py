"""Login throttling: too many wrong passwords for one username, or from one client address, in a
window of time lock further attempts out for a while (checked before any password is hashed).

Counters live in Django's cache: in-process in the embedded mode (one process serves every
login), Redis when REDIS_URL is set (settings.CACHES), so every web process sees one count.
If Redis fails, logins are not throttled for that request (logged), rather than all refused:
the same choice as the agent API's quota limiter.

The username lock lets a stranger keep one person's password login locked; Google login and
other addresses of an unlocked name are not affected, and the lock ends by itself.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time

import redis
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

logger = logging.getLogger(__name__)

PREFIX = "login-throttle"


def client_address(request: HttpRequest) -> str:
    """The address the request came from; behind our TLS proxy, the one that proxy saw."""
    forwarded = request.headers.get("X-Forwarded-For", "")
    if settings.SECURE_PROXY_SSL_HEADER and forwarded:
        # The proxy appends the peer it saw: the last entry is the only one it vouches for.
        return forwarded.split(",")[-1].strip()
    return str(request.META.get("REMOTE_ADDR", ""))


def _subjects(username: str, address: str) -> list[tuple[str, int]]:
    """(cache key stem, failures allowed) for each thing whose failures are counted."""
    name = hashlib.sha256(username.casefold().encode("utf-8", "surrogatepass")).hexdigest()
    place = hashlib.sha256(address.encode("utf-8", "surrogatepass")).hexdigest()
    return [
        (f"{PREFIX}:user:{name}", settings.UNDOABLE_LOGIN_MAX_FAILURES),
        (f"{PREFIX}:address:{place}", settings.ACCOUNTS_LOGIN_MAX_FAILURES_PER_ADDRESS),
    ]


def login_lockout_s(*, username: str, address: str) -> int | None:
    """Seconds until a login for `username` from `address` may be tried again; None: now."""
    try:
        ends = cache.get_many([f"{stem}:locked" for stem, _ in _subjects(username, address)])
    except redis.RedisError as exc:
        _failed("check", exc)
        return None
    if not ends:
        return None
    return max(1, math.ceil(max(ends.values()) - time.time()))


def login_failed(*, username: str, address: str) -> None:
    """Count a wrong password; at a subject's limit within the window, lock it out."""
    window_s = settings.UNDOABLE_LOGIN_FAILURE_WINDOW_S
    lockout_s = settings.UNDOABLE_LOGIN_LOCKOUT_S
    try:
        for stem, allowed in _subjects(username, address):
            key = f"{stem}:failures"
            cache.add(key, 0, timeout=window_s)  # the window starts at the first failure
            try:
                failures = cache.incr(key)
            except ValueError:  # the window ended between add and incr
                cache.set(key, 1, timeout=window_s)
                failures = 1
            if failures >= allowed:
                cache.set(f"{stem}:locked", time.time() + lockout_s, timeout=lockout_s)
                cache.delete(key)
                logger.warning(
                    "login locked out after failed attempts",
                    extra={"subject": stem.split(":")[1], "failures": failures},
                )
    except redis.RedisError as exc:
        _failed("count", exc)


def login_succeeded(*, username: str) -> None:
    """A right password (not locked out) clears the username's failures, not the address's."""
    stem, _ = _subjects(username, "")[0]
    try:
        cache.delete(f"{stem}:failures")
    except redis.RedisError as exc:
        _failed("clear", exc)


def _failed(operation: str, exc: redis.RedisError) -> None:
    logger.warning(
        "login throttle: Redis failed, not throttling this attempt",
        extra={"operation": operation, "error": repr(exc)},
    )
