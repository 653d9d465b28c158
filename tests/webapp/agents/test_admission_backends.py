"""UNDOABLE_ADMISSION chooses where the API counts rates, slots and the host's fair share."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from webapp.admission.backends import ProcessBackend, admission_backend, get_admission, get_limiter
from webapp.admission.fairshare import local_admission
from webapp.admission.fairshare_redis import RedisFairAdmission
from webapp.admission.ratelimit import local_limiter
from webapp.admission.ratelimit_redis import RedisRateLimiter


class CountingBackend(ProcessBackend):
    """A deployment's own backend, named by its dotted path."""


@override_settings(UNDOABLE_ADMISSION="process")
def test_process_counts_in_this_process():
    assert get_limiter() is local_limiter
    assert get_admission() is local_admission


@override_settings(UNDOABLE_ADMISSION="redis", REDIS_URL="redis://127.0.0.1:1/0")
def test_redis_counts_in_the_redis_at_redis_url():
    assert isinstance(get_limiter(), RedisRateLimiter)
    assert isinstance(get_admission(), RedisFairAdmission)


@override_settings(UNDOABLE_ADMISSION=f"{__name__}.CountingBackend")
def test_a_dotted_path_names_a_backend_class():
    assert isinstance(admission_backend(), CountingBackend)


@override_settings(UNDOABLE_ADMISSION="memcached")
def test_an_unknown_backend_says_what_it_takes():
    with pytest.raises(ImproperlyConfigured, match="not 'process', 'redis' or an admission"):
        admission_backend()


@override_settings(UNDOABLE_ADMISSION="redis", REDIS_URL=None)
def test_redis_without_redis_url_says_so():
    with pytest.raises(ImproperlyConfigured, match="needs REDIS_URL"):
        get_limiter()
