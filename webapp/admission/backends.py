"""Which admission backend serves the API: counters in this process, or shared through Redis.

Chosen by one setting, as Django chooses its EMAIL_BACKEND: `UNDOABLE_ADMISSION` names
"process" (the embedded default: one process serves everything, so its own counters are exact),
"redis" (the default when REDIS_URL is set: every web process of the deployment shares one
rate and one concurrency cap per token, and the machine's processes one fair share) or a
backend class's dotted path. The rest of the app calls get_limiter() and get_admission() and
never asks which one is on.
"""

from __future__ import annotations

import functools
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from webapp.admission.fairshare import Admission, local_admission
from webapp.admission.fairshare_redis import redis_admission_for
from webapp.admission.ratelimit import Limiter, local_limiter
from webapp.admission.ratelimit_redis import redis_limiter_for

SHORT_NAMES = {
    "process": "webapp.admission.backends.ProcessBackend",
    "redis": "webapp.admission.backends.RedisBackend",
}


class AdmissionBackend(Protocol):
    def limiter(self) -> Limiter:
        """The per-token limiter: rate and concurrency slots (webapp.admission.ratelimit)."""

    def admission(self) -> Admission:
        """The host's fair admission between users (webapp.admission.fairshare)."""


class ProcessBackend:
    """Counters in this process: exact for one process, per process otherwise."""

    def limiter(self) -> Limiter:
        return local_limiter

    def admission(self) -> Admission:
        return local_admission


class RedisBackend:
    """Counters in Redis at REDIS_URL (read on each call: tests point it at a server of their
    own). While Redis is unreachable each call falls back to the process's counters."""

    def limiter(self) -> Limiter:
        return redis_limiter_for(_redis_url())

    def admission(self) -> Admission:
        return redis_admission_for(_redis_url())


def _redis_url() -> str:
    if not settings.REDIS_URL:
        raise ImproperlyConfigured("UNDOABLE_ADMISSION='redis' needs REDIS_URL")
    return str(settings.REDIS_URL)


def admission_backend() -> AdmissionBackend:
    """The configured backend (the setting read on each call, so tests may switch it)."""
    name = settings.UNDOABLE_ADMISSION
    return _backend(SHORT_NAMES.get(name, name))


@functools.cache
def _backend(path: str) -> AdmissionBackend:
    try:
        backend: AdmissionBackend = import_string(path)()
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"UNDOABLE_ADMISSION={path!r}: not 'process', 'redis' or an admission backend's "
            "dotted path"
        ) from exc
    return backend


def get_limiter() -> Limiter:
    return admission_backend().limiter()


def get_admission() -> Admission:
    return admission_backend().admission()
