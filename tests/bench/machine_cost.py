"""What a batch of work costs the whole machine: CPU (every process and the kernel's own threads,
from /proc/stat) and page faults (/proc/vmstat), per item.

A sandbox's cost is mostly outside the process that asks for it (the template's forks, the
kernel tearing namespaces down on its own threads), so per-process figures would miss it. Run
it on an otherwise quiet machine: whatever else runs is counted too.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Namespaces and cgroups are freed by kernel threads after their last process is gone.
SETTLE_S = 0.3
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal ...; busy = all but idle
# and iowait.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class Cost:
    cpu_ms: float  # machine CPU per item
    faults: float  # page faults per item, minor and major
    per_s: float  # items per second of wall time

    def __str__(self) -> str:
        return f"{self.cpu_ms:5.2f} ms CPU, {self.faults:5.0f} faults, {self.per_s:6.1f}/s"


def in_threads(work: Callable[[], object], items: int, threads: int) -> None:
    """Call `work` `items` times in all, from `threads` threads at once."""
    remaining = iter(range(items))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if next(remaining, None) is None:
                    return
            work()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


def machine_cost(work: Callable[[], object], items: int, threads: int) -> Cost:
    """Call `work` `items` times from `threads` threads; its machine cost per call."""
    cpu, faults, started = _busy_s(), _page_faults(), time.perf_counter()
    in_threads(work, items, threads)
    wall = time.perf_counter() - started
    time.sleep(SETTLE_S)
    return Cost(
        cpu_ms=(_busy_s() - cpu) / items * 1000,
        faults=(_page_faults() - faults) / items,
        per_s=items / wall,
    )


def wait_until_quiet(busy_share: float, window_s: float, max_s: float) -> float:
    """Wait until the machine's CPU was busy less than `busy_share` (0-1, of every core) over a
    whole `window_s`, or `max_s` has passed; the seconds waited."""
    started = time.monotonic()
    cores = os.cpu_count() or 1
    while time.monotonic() - started < max_s:
        before = _busy_s()
        time.sleep(window_s)
        if (_busy_s() - before) / (window_s * cores) < busy_share:
            break
    return time.monotonic() - started


def _busy_s() -> float:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return sum(int(fields[i]) for i in _BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")


def _page_faults() -> int:
    for line in Path("/proc/vmstat").read_text().splitlines():
        name, value = line.split()
        if name == "pgfault":
            return int(value)
    return 0
