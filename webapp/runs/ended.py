"""What other apps do once a run's final status is recorded. Apps built on runs (webapp.actions:
a rest action starting to wait) add a listener in their AppConfig.ready: this app cannot import
them, they import it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from webapp.runs.models import Run

logger = logging.getLogger(__name__)

_listeners: list[Callable[[Run], None]] = []


def run_end_listener_add(listener: Callable[[Run], None]) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


def run_ended(run: Run) -> None:
    """Tell each listener `run` ended (its final status committed). A listener that fails is
    logged and the others still hear: the run's recorded end stands either way."""
    for listener in _listeners:
        try:
            listener(run)
        except Exception:
            logger.exception("run end listener failed", extra={"run_id": run.pk})
