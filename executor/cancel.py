"""Cancel a run from another thread (a Stop button, a dying worker, a deadline)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class CancelToken:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def cancel(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when cancelled (immediately if already cancelled)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)
