"""An in-process storage for limits' moving window, without a thread per request.

limits' own MemoryStorage starts a `threading.Timer` of 10 ms on a hit whenever its last one has
run out, to expire old entries: with requests more than 10 ms apart, that is a new thread for
every request, ~0.2 ms of each paced exec's latency on a 2-core host (docs/benchmarks.md, "exec
without Django's handler"). Here each key keeps at most its limit's entries (a deque bounded by
the limit, which is all a moving window ever looks at), and keys whose window has passed are
dropped every SWEEP_EVERY hits, on the hitting thread.

Only the moving window is kept: the strategy the API's limiter uses (webapp.admission.ratelimit).
"""

from __future__ import annotations

import threading
import time
from collections import deque

from limits.storage import MovingWindowSupport, Storage

SWEEP_EVERY = 1024


class _Window:
    __slots__ = ("expiry", "times")

    def __init__(self, limit: int, expiry: int, earlier: _Window | None = None) -> None:
        # Oldest first; an earlier window's latest entries are kept.
        self.times: deque[float] = deque(earlier.times if earlier else (), maxlen=limit)
        self.expiry = expiry


class WindowStorage(Storage, MovingWindowSupport):
    STORAGE_SCHEME = None

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}
        self._hits = 0

    @property
    def base_exceptions(self) -> tuple[type[Exception], ...]:
        return ()

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        if amount > limit:
            return False
        now = time.time()
        with self._lock:
            self._hits += 1
            if self._hits % SWEEP_EVERY == 0:
                self._sweep(now)
            window = self._windows.get(key)
            if window is None or window.times.maxlen != limit:  # new, or its limit changed
                window = self._windows[key] = _Window(limit, expiry, window)
            window.expiry = expiry
            times = window.times
            # Full if the entry `limit - amount` places back from the newest is still in the window.
            if len(times) > limit - amount and times[-(limit - amount + 1)] >= now - expiry:
                return False
            times.extend([now] * amount)
            return True

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        """(the oldest entry still in the window, or now; how many entries are in it). An entry
        exactly `expiry` old is out, as limits' MemoryStorage counts it."""
        now = time.time()
        with self._lock:
            window = self._windows.get(key)
            inside = [t for t in window.times if t > now - expiry] if window else []
        return (inside[0], len(inside)) if inside else (now, 0)

    def _sweep(self, now: float) -> None:
        gone = [k for k, w in self._windows.items() if not w.times or w.times[-1] < now - w.expiry]
        for key in gone:
            del self._windows[key]

    def keys(self) -> int:
        with self._lock:
            return len(self._windows)

    def reset(self) -> int:
        with self._lock:
            count = len(self._windows)
            self._windows.clear()
            return count

    def clear(self, key: str) -> None:
        with self._lock:
            self._windows.pop(key, None)

    def check(self) -> bool:
        return True

    # The fixed-window counters limits' other strategies use; the API's limiter never asks.
    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        raise NotImplementedError("only the moving window is kept here")

    def get(self, key: str) -> int:
        raise NotImplementedError("only the moving window is kept here")

    def get_expiry(self, key: str) -> float:
        raise NotImplementedError("only the moving window is kept here")
