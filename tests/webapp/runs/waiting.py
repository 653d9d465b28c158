"""Wait for a condition with a deadline (never a bare sleep)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], *, timeout: float = 15.0, what: str = "") -> None:
    """Re-check `condition` every 20 ms until true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        pause.wait(0.02)
