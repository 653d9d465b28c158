"""The reaper: ends what nobody will finish any more (a run whose worker was lost, a change
nobody can decide), every UNDOABLE_REAPER_INTERVAL_S, in every worker and in `manage.py runs_reap`.

What to end is the apps' business: each adds its reap function in its AppConfig.ready() (runs:
webapp.runs.reaper.runs_reap; workspaces: webapp.workspaces.reaper.changes_reap), so this
module imports none of them. A reap function is idempotent (conditional UPDATEs) and returns
the ids it ended.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import close_old_connections, connection

from webapp.reliability import conf

logger = logging.getLogger(__name__)

# (what it ends, as `runs_reap` reports it: "run(s)", reap function)
Reaper = tuple[str, Callable[[], list[int]]]

_reapers: list[Reaper] = []


def reaper_add(what: str, reap: Callable[[], list[int]]) -> None:
    """Have the reaper call `reap()` every round (once, however often ready() runs)."""
    if (what, reap) not in _reapers:
        _reapers.append((what, reap))


def reapers() -> list[Reaper]:
    """The reap functions, in the order the apps added them (INSTALLED_APPS)."""
    return list(_reapers)


class ReaperThread(threading.Thread):
    """Calls every reaper every UNDOABLE_REAPER_INTERVAL_S until `stop()`; survives database
    outages."""

    def __init__(self) -> None:
        super().__init__(name="run-reaper", daemon=True)
        self._stop_event = threading.Event()

    def run(self) -> None:
        interval = conf.seconds("UNDOABLE_REAPER_INTERVAL_S")
        while not self._stop_event.wait(interval):
            close_old_connections()
            try:
                for _, reap in reapers():
                    reap()
            except Exception as exc:  # PostgreSQL restarting: try again next round
                logger.warning("reaper round failed", extra={"error": repr(exc)})
                connection.close()
        connection.close()

    def stop(self) -> None:
        self._stop_event.set()
