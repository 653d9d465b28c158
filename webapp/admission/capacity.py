"""What this machine can serve, from the cores it may use: the defaults that follow capacity.

A per-token rate below what the machine can run would refuse an agent the machine could serve
(issue 41: `make loadtest` was refused at ~230 runs/s on 2 cores while the executor alone ran
~450). So by default the rate is set from the cores, with a per-core figure above the best one
measured (docs/benchmarks.md), and a deployment that knows better sets it.
"""

from __future__ import annotations

import math
import os

from django.conf import settings

# Runs one core could serve per second, at best and with room: about twice the best measured.
RUNS_PER_CORE_S = 500
# A token may send the rate's worth of this many seconds at once (the moving window's length).
RATE_WINDOW_S = 6


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which a container's cpuset narrows)."""
    return len(os.sched_getaffinity(0))


def token_rate() -> tuple[float, int]:
    """A token's requests per minute and burst: the settings, or by default what the machine's
    cores could serve (the burst: RATE_WINDOW_S seconds of that rate)."""
    per_minute = settings.AGENTS_RATE_PER_MINUTE or RUNS_PER_CORE_S * 60 * usable_cores()
    burst = int(settings.AGENTS_RATE_BURST) or math.ceil(per_minute * RATE_WINDOW_S / 60)
    return per_minute, burst
