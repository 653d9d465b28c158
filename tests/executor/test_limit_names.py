"""Every limit that stops a run is named in RunResult.limit, on each real backend.

Each program is bounded (it would end by itself well after its limit) and overshoots its limit
by far, so the name cannot come from a near miss.
"""

from __future__ import annotations

import dataclasses

import pytest
from hostile_kit import TEST_LIMITS

from executor.limits import Limits
from executor.stops import StopFacts, limit_that_stopped


def _limits(**changes: object) -> Limits:
    return dataclasses.replace(TEST_LIMITS, **changes)


def test_a_sleeper_is_stopped_by_the_wall_time(sandbox):
    result = sandbox.run("import time; time.sleep(20)", limits=_limits(wall_time_s=1))
    assert (result.limit, result.timed_out) == ("wall_time", True)


def test_a_spinner_is_stopped_by_the_cpu_time_and_that_is_a_timeout(sandbox):
    code = "import time\nend = time.monotonic() + 20\nwhile time.monotonic() < end: pass"
    result = sandbox.run(code, limits=_limits(wall_time_s=3, cpu_time_s=1))
    assert (result.limit, result.timed_out) == ("cpu_time", True)


def test_a_spinner_at_equal_wall_and_cpu_limits_is_named_cpu_time(sandbox):
    result = sandbox.run("while True: pass", limits=_limits(wall_time_s=2, cpu_time_s=2))
    assert (result.limit, result.timed_out) == ("cpu_time", True)


def test_a_spinner_that_ignores_sigxcpu_is_still_named_cpu_time(sandbox):
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass"
    result = sandbox.run(code, limits=_limits(wall_time_s=3, cpu_time_s=1))
    assert (result.limit, result.timed_out) == ("cpu_time", True)


def test_a_memory_hog_is_stopped_by_the_memory_limit(sandbox):
    code = "hoard = []\nfor _ in range(64):\n    hoard.append(b'x' * (16 << 20))"
    result = sandbox.run(code, limits=_limits(memory_mib=64, wall_time_s=3))
    assert (result.limit, result.oom_killed) == ("memory", True)


def test_a_flood_of_output_is_stopped_by_the_output_cap(sandbox):
    result = sandbox.run("while True: print('y' * 1000)", limits=_limits(wall_time_s=3))
    assert (result.limit, result.truncated) == ("output", True)


def test_a_file_past_the_size_limit_is_named_file_size(sandbox):
    result = sandbox.run(
        "exec head -c 64M /dev/zero > big.bin", language="bash", limits=_limits(max_file_size_mib=1)
    )
    assert result.limit == "file_size"


def test_a_run_that_ends_by_itself_names_no_limit(sandbox):
    result = sandbox.run("print(sum(range(1000)))")
    assert (result.exit_code, result.limit, result.timed_out) == (0, None, False)


@pytest.mark.parametrize(
    ("cpu_s", "runnable_s", "expected"),
    [(1.95, 1.96, "cpu_time"), (0.9, 2.0, "cpu_time"), (0.01, 0.02, "wall_time")],
)
def test_the_wall_timer_names_cpu_time_when_the_program_asked_for_its_cpu_budget(
    cpu_s, runnable_s, expected
):
    facts = StopFacts(
        exit_code=None,
        signal=15,
        cpu_s=cpu_s,
        runnable_s=runnable_s,
        wall_timer_fired=True,
        output_capped=False,
        oom_killed=False,
        pids_max_hit=False,
    )
    assert limit_that_stopped(facts, Limits(wall_time_s=2, cpu_time_s=2)) == expected
