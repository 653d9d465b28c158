"""Which limit stopped a run: one pure decision from facts the host owns.

Every backend gathers the same facts and asks `limit_that_stopped`; nothing the program prints
or writes is consulted. The facts: the wall timer the host (or its PID-1 supervisor) fired, the
output cap it enforced, the cgroup's OOM and pids counters, the program's wait status as its
PID-1 supervisor reaped it, and the CPU time in that wait's rusage.

A CPU-bound program at a wall limit equal to its CPU limit reaches both at once; which signal
lands first is a race between the kernel's CPU accounting and our timer, and on a busy host
the program gets less CPU than it asks for. So the name must not depend on the host's load:
when the wall timer stops a program that was running or waiting for a CPU (runnable) for its
whole CPU budget, the CPU budget is what it ran into, and the run is named `cpu_time`. A
program that slept or waited on I/O is `wall_time`.
"""

from __future__ import annotations

import signal as signals
from dataclasses import dataclass

from executor.limits import Limits
from executor.result import LimitName

# How far under its CPU limit a program stopped by the wall timer may be and still count as
# having spent its CPU budget: its start-up, a few scheduler ticks, the host's timer latency.
CPU_SLACK_S = 0.1


@dataclass(frozen=True)
class StopFacts:
    exit_code: int | None
    signal: int | None
    cpu_s: float | None  # user+system CPU time of the program, from its supervisor's wait4
    # When the wall timer fired: how long the program had been on a CPU or on a run queue.
    runnable_s: float | None
    wall_timer_fired: bool
    output_capped: bool
    oom_killed: bool
    pids_max_hit: bool  # the pids cgroup refused a fork
    cancelled: bool = False


def limit_that_stopped(facts: StopFacts, limits: Limits) -> LimitName | None:
    """The limit that stopped the run, or None (it ended by itself, or was cancelled)."""
    if facts.cancelled:
        return None
    if facts.output_capped:
        return "output"
    if facts.oom_killed:
        return "memory"
    if _cpu_spent(facts, limits):
        return "cpu_time"
    if facts.wall_timer_fired:
        return "wall_time"
    if facts.signal == signals.SIGXFSZ:
        return "file_size"
    if facts.pids_max_hit and facts.exit_code != 0:
        return "pids"
    return None


def _cpu_spent(facts: StopFacts, limits: Limits) -> bool:
    if facts.signal == signals.SIGXCPU:
        return True
    if facts.wall_timer_fired:
        asked = max(facts.cpu_s or 0.0, facts.runnable_s or 0.0)
        return asked >= limits.cpu_time_s - CPU_SLACK_S
    if facts.cpu_s is None:
        return False
    # Not our kill: SIGKILL from RLIMIT_CPU's hard limit (a program that ignored SIGXCPU).
    return facts.signal == signals.SIGKILL and facts.cpu_s >= limits.cpu_time_s


def limit_line(limit: LimitName, limits: Limits) -> str:
    """One human line naming the limit that stopped a run, with its value."""
    what = {
        "wall_time": f"time limit ({limits.wall_time_s:g} s)",
        "cpu_time": f"CPU time limit ({limits.cpu_time_s:g} s)",
        "memory": f"memory limit ({limits.memory_mib} MiB)",
        "output": f"output limit ({limits.max_output_bytes} bytes)",
        "pids": f"process limit ({limits.max_pids})",
        "file_size": f"file size limit ({limits.max_file_size_mib} MiB)",
    }[limit]
    return f"Stopped: {what} reached."
