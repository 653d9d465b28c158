"""The reliability knobs, in seconds: UNDOABLE_RUN_HEARTBEAT_INTERVAL_S, UNDOABLE_RUN_LOST_AFTER_S,
UNDOABLE_RUN_QUEUED_TIMEOUT_S and UNDOABLE_REAPER_INTERVAL_S (webapp/settings.py documents each
one).

Read at call time, so tests can use override_settings.
"""

from __future__ import annotations

from django.conf import settings


def seconds(name: str) -> float:
    return float(getattr(settings, name))
