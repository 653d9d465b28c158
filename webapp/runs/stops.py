"""A Stop for a run, as a short-lived flag in Django's cache (local memory in the embedded mode,
Redis in production) that the run's watcher polls, wherever the run executes."""

from __future__ import annotations

from django.core.cache import cache

from webapp.executor_glue import CancelToken

# How often a running run's watcher looks for a Stop (webapp.runs.execution._watch).
STOP_POLL_INTERVAL_S = 0.2
_STOP_TTL_S = 3600
_STOP_PREFIX = "run-stop:"


def stop_send(run_id: int) -> None:
    cache.set(_STOP_PREFIX + str(run_id), 1, timeout=_STOP_TTL_S)


def stop_requested(run_id: int) -> bool:
    return cache.get(_STOP_PREFIX + str(run_id)) is not None


def stop_clear(run_id: int) -> None:
    cache.delete(_STOP_PREFIX + str(run_id))


class RunCancel(CancelToken):
    """A run's CancelToken, which also says when the host rather than a person ended the run."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None  # None: a person's Stop

    def end(self, reason: str) -> None:
        """Kill the run's sandbox because of `reason` (the run fails with it)."""
        if not self.cancelled:
            self.reason = reason
        self.cancel()
