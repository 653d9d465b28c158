"""Runs this process started for a request, which a stopping server ends with a reason.

The web runs have their own runner (webapp.runs.runner); an agent's stateless exec runs on the
request's own thread. At the end of the grace period webapp.server.draining calls `runs_end()`: each
such run's sandbox is killed and its request answers 503 (webapp.agents.exec_services) instead
of being cut with no answer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from webapp.executor_glue import CancelToken

# Why a run or a request the server did not finish ended: a run's error, a request's 503.
SERVER_STOPPED = "The server stopped before the run ended."

_lock = threading.Lock()
_running: set[CancelToken] = set()
_ended = False


@contextmanager
def ended_when_the_server_stops() -> Iterator[CancelToken]:
    """A CancelToken for one run, cancelled by runs_end() (at once if it was called already)."""
    token = CancelToken()
    with _lock:
        if _ended:
            token.cancel()
        else:
            _running.add(token)
    try:
        yield token
    finally:
        with _lock:
            _running.discard(token)


def runs_end() -> None:
    """The grace period is over: kill every run registered, and any registered from now on."""
    global _ended
    with _lock:
        _ended = True
        tokens = list(_running)
    for token in tokens:
        token.cancel()


def reset() -> None:
    """Forget runs_end() (tests that stop a server inside the test process)."""
    global _ended
    with _lock:
        _ended = False
