"""The `undoable` command's cost: `undoable --help`, and `undoable exec -` of print(1) end to
end against the same request made by the client library in-process, on a real server process
(bench_api.served). Targets (issue 44): --help under 150 ms; exec within 100 ms of the library.

Timed as users get it: the client package built into a wheel and installed (not editable) in
a throwaway venv made for this run, all offline from the local tree (cli_install.py), its
console script run as is. Beside it, the same command from the source tree in the dev venv,
whose editable-install finder (a .pth file) every interpreter there loads at start, and each
venv's bare interpreter (`python -c pass`), all in the same run, interleaved sample by sample
so that the machine's load falls on all of them alike.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# BENCH_CLIENT_PROJECT: another copy of clients/python (e.g. an older commit's) to compare.
CLIENT_PROJECT = Path(os.environ.get("BENCH_CLIENT_PROJECT") or ROOT / "clients" / "python")
sys.path.insert(0, str(CLIENT_PROJECT / "src"))

from tests.bench.bench_api import served  # noqa: E402
from tests.bench.cli_install import console_script, install_client  # noqa: E402

RUNS = int(os.environ.get("BENCH_CLI_RUNS", "20"))
HELP_TARGET_MS = 150.0
EXEC_TARGET_MS = 100.0  # over the library's in-process call


class Timed:
    """One command's samples: wall time, and the CPU time (user + system) of its process: on
    a machine shared with other work the wall time mostly measures the neighbours."""

    def __init__(self, label: str, argv: list[str], env: dict[str, str], stdin: str = "") -> None:
        self.label, self.argv, self.env, self.stdin = label, argv, env, stdin
        self.wall_ms: list[float] = []
        self.cpu_ms: list[float] = []

    def sample(self) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(self.argv, input=self.stdin, env=self.env, capture_output=True, text=True,
                       check=True)  # fmt: skip
        self.wall_ms.append((time.perf_counter() - start) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        self.cpu_ms.append(used * 1000)

    def line(self, note: str = "") -> str:
        wall, cpu = statistics.median(self.wall_ms), statistics.median(self.cpu_ms)
        return f"  {self.label:34} p50 {wall:7.1f} ms  cpu {cpu:6.1f} ms  {note}".rstrip()


class InProcess:
    """A call made in this process: its wall time."""

    def __init__(self, label: str, work: Callable[[], object]) -> None:
        self.label, self.work = label, work
        self.wall_ms: list[float] = []

    def sample(self) -> None:
        start = time.perf_counter()
        self.work()
        self.wall_ms.append((time.perf_counter() - start) * 1000)

    def line(self) -> str:
        return f"  {self.label:34} p50 {statistics.median(self.wall_ms):7.1f} ms"


def interleaved(timed: list[Timed | InProcess], runs: int) -> None:
    """`runs` samples of each, one of each in turn, after one warm-up each (not counted)."""
    for each in timed:
        each.sample()
        each.wall_ms.clear()
        if isinstance(each, Timed):
            each.cpu_ms.clear()
    for _ in range(runs):
        for each in timed:
            each.sample()


def dev_environment(pycache: str) -> dict[str, str]:
    """The dev venv running the source tree, its bytecode written once and reused as on a
    machine that writes it (outside the tree: PYTHONPYCACHEPREFIX)."""
    env = {**os.environ, "PYTHONPATH": str(CLIENT_PROJECT / "src"), "PYTHONPYCACHEPREFIX": pycache}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def main() -> None:
    from undoable_client import Client

    with tempfile.TemporaryDirectory(prefix="undoable-bench-cli-") as scratch:
        venv = install_client(CLIENT_PROJECT, Path(scratch))
        installed = str(venv / "bin" / "undoable")
        dev_script = console_script(Path(scratch) / "dev-bin", sys.executable)
        user_env = {**os.environ}
        user_env.pop("PYTHONPATH", None)
        dev_env = dev_environment(str(Path(scratch) / "pycache"))
        bare_user = Timed("python -c pass (installed venv)", [str(venv / "bin" / "python"),
                          "-c", "pass"], user_env)  # fmt: skip
        bare_dev = Timed("python -c pass (dev venv)", [sys.executable, "-c", "pass"], dev_env)
        help_user = Timed("undoable --help (installed)", [installed, "--help"], user_env)
        help_dev = Timed("undoable --help (dev, source tree)", [dev_script, "--help"], dev_env)
        interleaved([bare_user, bare_dev, help_user, help_dev], RUNS)

        with served() as (port, token):
            url = f"http://127.0.0.1:{port}"
            for env in (user_env, dev_env):
                env.update(UNDOABLE_URL=url, UNDOABLE_TOKEN=token)
            client = Client(url, token)
            for _ in range(20):  # fills the warm pool
                client.exec("print(1)")
            library = InProcess("Client.exec (in-process, kept)", lambda: client.exec("print(1)"))
            exec_user = Timed("undoable exec - (installed)", [installed, "exec", "-"], user_env,
                              stdin="print(1)")  # fmt: skip
            exec_dev = Timed("undoable exec - (dev, source tree)", [dev_script, "exec", "-"],
                             dev_env, stdin="print(1)")  # fmt: skip
            interleaved([library, exec_user, exec_dev], RUNS)

    load = " ".join(f"{n:.1f}" for n in os.getloadavg())
    print(f"bench_cli ({RUNS} runs each, interleaved; load average {load}; {os.cpu_count()} CPUs)")
    for timed in (bare_user, bare_dev):
        print(timed.line())
    for timed in (help_user, help_dev):
        print(timed.line(f"(target < {HELP_TARGET_MS:.0f} ms)"))
    print(library.line())
    for timed in (exec_user, exec_dev):
        over = statistics.median(timed.wall_ms) - statistics.median(library.wall_ms)
        print(timed.line(f"(+{over:.1f} ms; target +{EXEC_TARGET_MS:.0f} ms)"))


if __name__ == "__main__":
    main()
