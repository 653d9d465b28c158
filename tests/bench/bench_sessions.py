"""Session latency per backend: create, first cell, later cells, close; next to the bare floor.

    python tests/bench/bench_sessions.py [--sessions 20] [--cells 100] [--only bwrap,docker]

For each backend (built with no warm pool, as executor.create_backend builds it) a fresh
SessionManager creates `--sessions` sessions one after another (the
first create of the manager is reported apart as "cold"), runs one cell `1+1` in each (its
first cell), then `--cells` more in the last one (warm cells), and closes them. In the same
loop it starts the floor, `/usr/bin/python3 -I -S -c 'print(1+1)'` as a plain subprocess, and
prints p50/p90/p99 of each step with the p50 ratio to the floor. A backend that is unavailable
is skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a plain script from anywhere

import executor  # noqa: E402
from executor.errors import ExecutorError  # noqa: E402
from executor.limits import Limits  # noqa: E402
from executor.sessions.config import SessionConfig  # noqa: E402
from executor.sessions.manager import SessionManager  # noqa: E402

FLOOR = ["/usr/bin/python3", "-I", "-S", "-c", "print(1+1)"]
T = TypeVar("T")


def timed(step: list[float], floor: list[float], action: Callable[[], T]) -> T:
    started = time.perf_counter()
    value = action()
    step.append(time.perf_counter() - started)
    started = time.perf_counter()
    subprocess.run(FLOOR, check=True, stdout=subprocess.DEVNULL)
    floor.append(time.perf_counter() - started)
    return value


def line(name: str, step: list[float], floor: list[float]) -> str:
    if len(step) == 1:
        ratio = step[0] / floor[0]
        return f"{name:<24} {1:>5} {step[0] * 1000:>8.1f} {'':>8} {'':>8} | {ratio:>6.2f}x"
    cuts = statistics.quantiles(step, n=100, method="inclusive")
    p50, p90, p99 = cuts[49] * 1000, cuts[89] * 1000, cuts[98] * 1000
    ratio = statistics.median(step) / statistics.median(floor)
    return f"{name:<24} {len(step):>5} {p50:>8.1f} {p90:>8.1f} {p99:>8.1f} | {ratio:>6.2f}x"


def bench(backend: str, sessions: int, cells: int) -> None:
    root = tempfile.mkdtemp(prefix="undoable-bench-sessions-")
    os.chmod(root, 0o711)  # the bwrap sandbox's uid binds a workspace below it
    config = SessionConfig(
        root_dir=os.path.join(root, "sessions"),
        limits=Limits(wall_time_s=10),
        max_sessions=sessions,
    )
    options: dict[str, object] = {"warm_pool_size": 0}
    if backend == "bwrap":
        options["rootfs"] = str(REPO / "var" / "sandbox-rootfs")
    try:
        sandboxes = executor.create_backend(backend, **options)
    except (ExecutorError, ImportError) as exc:
        print(f"{backend:<8} skipped: backend unavailable ({exc})", flush=True)
        shutil.rmtree(root)
        return
    try:
        manager = SessionManager(config, sandboxes)
    except BaseException:
        sandboxes.close()
        shutil.rmtree(root)
        raise
    steps: dict[str, tuple[list[float], list[float]]] = {}

    def step(name: str) -> tuple[list[float], list[float]]:
        return steps.setdefault(f"{backend} {name}", ([], []))

    try:
        opened = [timed(*step("create, cold"), manager.create)]
        opened += [timed(*step("create"), manager.create) for _ in range(sessions - 1)]
        for session in opened:
            assert timed(*step("first cell"), lambda s=session: s.exec("1+1")).stdout == "2\n"
        for _ in range(cells):
            assert timed(*step("warm cell"), lambda: opened[-1].exec("1+1")).stdout == "2\n"
        for session in opened:
            timed(*step("close"), lambda s=session: manager.close(s.id))
    finally:
        manager.shutdown()
        sandboxes.close()
        shutil.rmtree(root, ignore_errors=True)
    for name, (values, floor) in steps.items():
        print(line(name, values, floor), flush=True)
    floor = [f for _, fl in steps.values() for f in fl]
    print(f"{backend} floor p50 {statistics.median(floor) * 1000:.1f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--cells", type=int, default=100)
    parser.add_argument("--only", default="bwrap,docker")
    args = parser.parse_args()
    print(
        f"{'step':<24} {'n':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} | p50/floor", flush=True
    )
    for backend in filter(None, args.only.split(",")):
        bench(backend, args.sessions, args.cells)


if __name__ == "__main__":
    main()
