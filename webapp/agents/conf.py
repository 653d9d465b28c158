"""The agent API's knobs. Each reads an optional Django setting (see the lead's settings.py).

Read at call time, not import time, so tests can use override_settings.
"""

from __future__ import annotations

from django.conf import settings

_DEFAULTS: dict[str, float | int] = {
    # Requests per minute per token (token bucket) and how many may burst at once.
    "AGENTS_RATE_PER_MINUTE": 600,
    "AGENTS_RATE_BURST": 60,
    # Runs in flight at once per token (stateless exec and session cells together).
    "AGENTS_MAX_CONCURRENT_PER_TOKEN": 8,
    "AGENTS_MAX_BODY_BYTES": 4 * 1024 * 1024,
    "AGENTS_MAX_CODE_BYTES": 256 * 1024,
    "AGENTS_MAX_FILES_BYTES": 2 * 1024 * 1024,
    "AGENTS_MAX_FILES": 64,
    "AGENTS_MAX_STDIN_BYTES": 1024 * 1024,
    "AGENTS_DEFAULT_TIMEOUT_S": 10.0,
    # Threads that wait on sandboxes, so the event loop never blocks on a run.
    "AGENTS_EXEC_THREADS": 32,
    # Sessions.
    "AGENTS_MAX_SESSIONS_PER_USER": 3,
    "AGENTS_SESSION_IDLE_S": 600.0,
    "AGENTS_SESSION_MAX_LIFETIME_S": 3600.0,
    "AGENTS_SESSION_MAX_FILE_BYTES": 32 * 1024 * 1024,
    "AGENTS_SESSION_MEMORY_MIB": 512,
    "AGENTS_SESSION_WORKDIR_QUOTA_MIB": 256,
}


def get(name: str) -> float:
    """The value of AGENTS_* setting `name`, or its default."""
    return getattr(settings, name, _DEFAULTS[name])


def get_int(name: str) -> int:
    return int(get(name))
