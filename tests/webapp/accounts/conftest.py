"""Every accounts test starts with no login failures counted (the cache outlives a test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _no_login_failures() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()
