"""The agent API's knobs: the AGENTS_* settings (webapp/settings.py documents each one).

Read at call time, not import time, so tests can use override_settings.
"""

from __future__ import annotations

from django.conf import settings


def get(name: str) -> float:
    """The value of AGENTS_* setting `name`."""
    return getattr(settings, name)


def get_int(name: str) -> int:
    return int(get(name))
