"""Wake-ups for the threads that hold db transactions open: Keep/Discard reach them at once.

The choice itself is written to the PendingChange row by the Keep/Discard services (any process).
The thread holding the transaction lives in the worker that ran the code; in that same process
`decision_made` wakes it at once and can wait until it has committed or rolled back, so the
person sees the result of their click; from any other process it notices the row within its
polling interval.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Holder:
    wake: threading.Event = field(default_factory=threading.Event)
    settled: threading.Event = field(default_factory=threading.Event)


_holders: dict[int, Holder] = {}
_lock = threading.Lock()


def listen(change_id: int) -> Holder:
    with _lock:
        return _holders.setdefault(change_id, Holder())


def forget(change_id: int) -> None:
    with _lock:
        holder = _holders.pop(change_id, None)
    if holder is not None:
        holder.settled.set()


def decision_made(change_id: int, *, wait_s: float = 0.0) -> bool:
    """Wake this process's holder of `change_id`; True if it settled within `wait_s`."""
    with _lock:
        holder = _holders.get(change_id)
    if holder is None:
        return False
    holder.wake.set()
    return holder.settled.wait(wait_s)
