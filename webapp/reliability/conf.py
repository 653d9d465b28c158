"""The reliability knobs: Django settings when defined there, else the environment.

Names and defaults (seconds):
- RUN_HEARTBEAT_INTERVAL_S (2): how often a worker touches Run.heartbeat_at and its registry key.
- RUN_LOST_AFTER_S (30): a running run whose heartbeat is older than this is "worker lost".
- RUN_QUEUED_TIMEOUT_S (3600): a run still queued after this never found a worker.
- REAPER_INTERVAL_S (5): how often each worker's reaper looks.
"""

from __future__ import annotations

from django.conf import settings

from webapp.env import env_float

_DEFAULTS = {
    "RUN_HEARTBEAT_INTERVAL_S": 2.0,
    "RUN_LOST_AFTER_S": 30.0,
    "RUN_QUEUED_TIMEOUT_S": 3600.0,
    "REAPER_INTERVAL_S": 5.0,
}


def seconds(name: str) -> float:
    """Setting `name` (see module doc), read from settings or `UNDOABLE_<name>`."""
    if hasattr(settings, name):
        return float(getattr(settings, name))
    return env_float(f"UNDOABLE_{name}", _DEFAULTS[name], minimum=0.1)
