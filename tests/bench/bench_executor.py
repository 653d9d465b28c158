"""Executor latency: `print(1+1)` per backend, next to the bare floor, and their ratio.

    python tests/bench/bench_executor.py [--runs 200] [--concurrency 8] [--only bwrap-warm,...]
        [--program print|imports]

`--program imports` runs a program that imports what LLM-written code imports most (`json`,
`re`, `typing`, `datetime`, `collections`), with the same program as the floor: the bwrap
zygote's template has them loaded already (docs/zygote.md).

For each backend mode it runs `print(1+1)` `--runs` times, sequentially and then from
`--concurrency` threads at once, and in the same loop (same thread, right after each run)
starts the floor: `/usr/bin/python3 -I -S -c 'print(1+1)'` as a plain subprocess, which is
what any sandbox costs at the very least. It prints p50/p90/p99 of both and the p50 ratio.
For warm modes it then prints what a run costs the whole machine (CPU, page faults) from
`--concurrency` threads, the backend's runs and the floor's each alone: on a CPU-bound host
(HumanEval, 4 at a time on 2 cores) that ratio, not latency, sets the wall time.

Modes: bwrap-warm (warm pool; sequential runs wait for the pool to refill between runs, so
each run is a warm one), bwrap-cold (no pool), docker-warm (runs forked from the template in
a container), docker-containers (a warm pool of containers, one per run). A
backend that is unavailable is skipped with a note. Targets (issue 2): bwrap p50 within 2x of
the floor; Docker warm p50 under 100 ms.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a plain script from anywhere

import executor  # noqa: E402
from executor.errors import ExecutorError  # noqa: E402
from executor.spec import RunSpec  # noqa: E402
from tests.bench.machine_cost import in_threads, machine_cost  # noqa: E402

FLOOR = ["/usr/bin/python3", "-I", "-S", "-c", "print(1+1)"]
PROGRAMS = {
    "print": ("print(1+1)", "2\n"),
    "imports": (
        "import collections, datetime, json, re, typing\nprint(json.dumps(re.findall('a', 'aa')))",
        '["a", "a"]\n',
    ),
}
WARM_WAIT_S = 60.0


@dataclass
class Program:
    code: str
    expected: str

    @property
    def spec(self) -> RunSpec:
        return RunSpec(code=self.code)

    @property
    def floor(self) -> list[str]:
        return [*FLOOR[:-1], self.code]


@dataclass
class Mode:
    name: str
    backend: str
    options: dict[str, Any]
    warm: bool


@dataclass
class Samples:
    run_s: list[float] = field(default_factory=list)
    floor_s: list[float] = field(default_factory=list)
    failures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def modes(concurrency: int) -> list[Mode]:
    rootfs = str(REPO / "var" / "sandbox-rootfs")
    return [
        Mode("bwrap-warm", "bwrap", {"rootfs": rootfs, "warm_pool_size": concurrency}, True),
        Mode("bwrap-cold", "bwrap", {"rootfs": rootfs, "warm_pool_size": 0}, False),
        Mode("docker-warm", "docker", {"warm_pool_size": concurrency}, True),
        # Docker's container per run: its sessions', and every run's without the template.
        Mode(
            "docker-containers",
            "docker",
            {"warm_pool_size": concurrency, "zygote": False},
            True,
        ),
    ]


def one_iteration(backend: Any, program: Program, samples: Samples) -> None:
    started = time.perf_counter()
    result = backend.run(program.spec, limits=executor.Limits())
    ran = time.perf_counter()
    floor = subprocess.run(program.floor, capture_output=True, check=False)
    done = time.perf_counter()
    with samples.lock:
        if result.stdout != program.expected or floor.stdout != program.expected.encode():
            samples.failures += 1
        samples.run_s.append(ran - started)
        samples.floor_s.append(done - ran)


def sequential(backend: Any, program: Program, runs: int, warm: bool) -> Samples:
    samples = Samples()
    for _ in range(runs):
        if warm:
            backend.wait_warm(WARM_WAIT_S)  # not timed: each measured run finds a full pool
        one_iteration(backend, program, samples)
    return samples


def concurrent(backend: Any, program: Program, runs: int, threads: int, warm: bool) -> Samples:
    samples = Samples()
    if warm:
        backend.wait_warm(WARM_WAIT_S)
    in_threads(lambda: one_iteration(backend, program, samples), runs, threads)
    return samples


def percentiles(values: list[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[89] * 1000, cuts[98] * 1000


def report_line(name: str, how: str, samples: Samples) -> str:
    run = percentiles(samples.run_s)
    floor = percentiles(samples.floor_s)
    ratio = run[0] / floor[0]
    failed = f"  ({samples.failures} wrong outputs!)" if samples.failures else ""
    return (
        f"{name:<12} {how:<14} {len(samples.run_s):>5} "
        f"{run[0]:>8.1f} {run[1]:>8.1f} {run[2]:>8.1f} | "
        f"{floor[0]:>7.1f} {floor[1]:>7.1f} {floor[2]:>7.1f} | {ratio:>6.2f}x{failed}"
    )


def cost_line(name: str, backend: Any, program: Program, runs: int, threads: int) -> str:
    """Machine CPU and page faults per run, the backend's and the floor's, each alone."""
    backend.wait_warm(WARM_WAIT_S)
    ours = machine_cost(lambda: backend.run(program.spec, limits=executor.Limits()), runs, threads)
    floor = machine_cost(
        lambda: subprocess.run(program.floor, capture_output=True, check=False), runs, threads
    )
    return (
        f"{name:<12} machine cost per run, {threads} threads: {ours}; floor {floor}; "
        f"CPU {ours.cpu_ms / floor.cpu_ms:.2f}x floor"
    )


def bench_mode(
    mode: Mode, program: Program, runs: int, threads: int, emit: Callable[[str], None]
) -> None:
    try:
        backend = executor.create_backend(mode.backend, **mode.options)
    except (ExecutorError, ImportError) as exc:
        emit(f"{mode.name:<12} skipped: backend unavailable ({exc})")
        return
    try:
        emit(report_line(mode.name, "sequential", sequential(backend, program, runs, mode.warm)))
        at_once = concurrent(backend, program, runs, threads, mode.warm)
        emit(report_line(mode.name, f"{threads}-way threads", at_once))
        if mode.warm:
            emit(cost_line(mode.name, backend, program, runs, threads))
    finally:
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--only", default="", help="comma list of modes, e.g. bwrap-warm")
    parser.add_argument("--program", choices=sorted(PROGRAMS), default="print")
    args = parser.parse_args()
    wanted = set(filter(None, args.only.split(",")))
    program = Program(*PROGRAMS[args.program])

    def emit(line: str) -> None:
        print(line, flush=True)

    emit(f"{program.code!r}: {args.runs} runs per row; the floor runs it bare in the same loop")
    emit(
        f"{'backend':<12} {'how':<14} {'runs':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} | "
        f"{'floor50':>7} {'floor90':>7} {'floor99':>7} | {'p50/floor':>7}"
    )
    for mode in modes(args.concurrency):
        if not wanted or mode.name in wanted:
            bench_mode(mode, program, args.runs, args.concurrency, emit)


if __name__ == "__main__":
    main()
