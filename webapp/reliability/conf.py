"""The reliability knobs, in seconds: RUN_HEARTBEAT_INTERVAL_S, RUN_LOST_AFTER_S,
RUN_QUEUED_TIMEOUT_S and REAPER_INTERVAL_S (webapp/settings.py documents each one).

Read at call time, so tests can use override_settings.
"""

from __future__ import annotations

from django.conf import settings


def seconds(name: str) -> float:
    return float(getattr(settings, name))
