"""Which quota implementations serve this call: in-process, or shared through Redis.

The one place that asks whether REDIS_URL is set, at call time (settings can change, e.g. in
tests); callers use the returned object's methods.
"""

from __future__ import annotations

from django.conf import settings

from webapp.agents.fairshare import Admission, local_admission
from webapp.agents.fairshare_redis import redis_admission_for
from webapp.agents.ratelimit import Limiter, local_limiter
from webapp.agents.ratelimit_redis import redis_limiter_for


def get_limiter() -> Limiter:
    """The per-token limiter: shared through Redis when REDIS_URL is set, else in-process."""
    if not settings.REDIS_URL:
        return local_limiter
    return redis_limiter_for(settings.REDIS_URL)


def get_admission() -> Admission:
    """This host's admission: shared through Redis when REDIS_URL is set, else in-process."""
    if not settings.REDIS_URL:
        return local_admission
    return redis_admission_for(settings.REDIS_URL)
