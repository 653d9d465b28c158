"""The agent exec path of docker-compose.yml's web beside the embedded default (issue 18).

Starts, on this machine, an embedded `make run`-style server (`python -m webapp.server.serve`:
SQLite, in-process everything, bubblewrap on the host) and the compose topology from local images
(tests/bench/compose_stack.py: postgres, redis, web, worker, worker-kinds; web runs bubblewrap
inside its container), then, in rounds that alternate between them so the machine's drift hits
both alike, sends `print(1+1)` to POST /api/v1/exec sequentially and at concurrency 8 (one
keep-alive connection per client thread). Compose's web is reached at its container address
(as a load balancer would) and through the published port (Docker's userland proxy). A fourth
target tells the containers' cost from the topology's: a host server like the embedded one but
on the compose stack's PostgreSQL and Redis (DATABASE_URL, REDIS_URL), as production runs it.
Prints p50/p99 and runs/s per round, their medians, runs/s per core, compose / embedded, and
the CPU time per run at concurrency 8 of the server with its sandboxes (the web container's
cgroup, plus docker-proxy for the published port; a host server's own and its reaped children's
times) and of PostgreSQL + Redis.
Target (issue 18): at concurrency 8, compose's runs/s per core >= 80% of the embedded one's
and its p50 within 2x.

    make bench-compose            (BENCH_ROUNDS, BENCH_SERIAL_RUNS, BENCH_PARALLEL_RUNS)
"""

from __future__ import annotations

import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a plain script from anywhere

from tests.bench.bench_api import exec_once, floor_ms, timed_threads  # noqa: E402
from tests.bench.compose_stack import ComposeStack  # noqa: E402
from tests.local_servers import free_port  # noqa: E402

PY = sys.executable
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SERIAL_RUNS = int(os.environ.get("BENCH_SERIAL_RUNS", "100"))
PARALLEL_RUNS = int(os.environ.get("BENCH_PARALLEL_RUNS", "400"))
CONCURRENCY = 8


@dataclass
class Target:
    name: str
    url: str
    token: str
    server_cpu: Callable[[], float]
    store_cpu: Callable[[], float] = lambda: 0.0
    serial: list[list[float]] = field(default_factory=list)
    parallel: list[list[float]] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    store_ms: list[float] = field(default_factory=list)


def process_cpu(pid: int) -> Callable[[], float]:
    """CPU seconds of a host process and of the children it reaped (its sandboxes)."""

    def read() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    return read


def proxy_pid(port: int) -> int | None:
    """The docker-proxy process forwarding host port `port` (Docker's userland proxy), if any."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if argv and argv[0].endswith(b"docker-proxy") and str(port).encode() in argv:
            return int(entry.name)
    return None


def summed(*reads: Callable[[], float]) -> Callable[[], float]:
    return lambda: sum(read() for read in reads)


def container_cpu(*containers: str) -> Callable[[], float]:
    """CPU seconds of containers, from their cgroups (v1 cpuacct with the cgroupfs driver, or
    v2): everything in them, sandboxes included."""
    paths = []
    for container in containers:
        v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{container}/cpuacct.usage")
        paths.append(
            v1
            if v1.exists()
            else Path(f"/sys/fs/cgroup/system.slice/docker-{container}.scope/cpu.stat")
        )

    def read() -> float:
        total = 0.0
        for path in paths:
            text = path.read_text()
            if path.name == "cpuacct.usage":
                total += int(text) / 1e9
            else:
                total += int(text.split()[1]) / 1e6  # usage_usec
        return total

    return read


def connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)


def sequential(target: Target) -> None:
    conn = connect(target.url)
    target.serial.append([exec_once(conn, target.token) for _ in range(SERIAL_RUNS)])
    conn.close()


def concurrent(target: Target) -> None:
    server_before, store_before = target.server_cpu(), target.store_cpu()
    per_thread = PARALLEL_RUNS // CONCURRENCY
    latencies: list[float] = []

    def client(ready: Callable[[], None]) -> None:
        conn = connect(target.url)
        ready()
        mine = [exec_once(conn, target.token) for _ in range(per_thread)]
        conn.close()
        latencies.extend(mine)

    target.rates.append(per_thread * CONCURRENCY / timed_threads(client, CONCURRENCY))
    target.parallel.append(latencies)
    time.sleep(0.5)  # the last sandboxes' teardown, off the request path, is theirs too
    runs = per_thread * CONCURRENCY
    target.server_ms.append((target.server_cpu() - server_before) * 1000 / runs)
    target.store_ms.append((target.store_cpu() - store_before) * 1000 / runs)


def p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def start_embedded(
    stores: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str, str]:
    """The embedded default as `make run` serves it, on a free port with its own var dir; with
    `stores` (DATABASE_URL, REDIS_URL of a migrated database) a production-style host server,
    and no token of its own (empty)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")
    }
    env.update(
        UNDOABLE_VAR_DIR=tempfile.mkdtemp(prefix="undoable-bench-compose-"),
        EXECUTOR_ROOTFS=str(ROOT / "var" / "sandbox-rootfs"),
        UNDOABLE_LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
        **(stores or {}),
    )

    def manage(*args: str) -> str:
        done = subprocess.run(
            [PY, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    token = ""
    if not stores:
        manage("migrate", "--noinput")
        manage(
            "shell",
            "-c",
            "from django.contrib.auth.models import User; User.objects.create_user('bench')",
        )
        token = manage("create_api_token", "bench").splitlines()[-1]
    port = free_port()
    argv = [PY, "-m", "webapp.server.serve", "-b", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("the embedded server did not start") from None
            time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}", token


def compose_token(stack: ComposeStack) -> str:
    stack.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User; User.objects.create_user('bench')",
    )
    return stack.manage("create_api_token", "bench").strip().splitlines()[-1]


def report(targets: list[Target], floors: list[float]) -> None:
    cores = os.cpu_count() or 1
    print(
        f"\nbench_compose: {ROUNDS} rounds; per round {SERIAL_RUNS} sequential runs and "
        f"{PARALLEL_RUNS} at concurrency {CONCURRENCY}; {cores} cores; floor p50 per round "
        + ", ".join(f"{f:.1f}" for f in floors)
        + " ms"
    )
    for t in targets:
        print(f"  {t.name}")
        for i in range(len(t.rates)):
            print(
                f"    round {i + 1}: sequential p50 {p(t.serial[i], 0.5):6.1f} ms p99 "
                f"{p(t.serial[i], 0.99):6.1f} ms | c=8 {t.rates[i]:5.1f} runs/s "
                f"({t.rates[i] / cores:4.1f}/core) p50 {p(t.parallel[i], 0.5):6.1f} ms "
                f"p99 {p(t.parallel[i], 0.99):6.1f} ms"
            )
    base = targets[0]

    def med(values: list[float]) -> float:
        return statistics.median(values)

    base_rate = med(base.rates)
    base_p50 = med([p(s, 0.5) for s in base.parallel])
    base_seq = med([p(s, 0.5) for s in base.serial])
    print("  medians over the rounds, and / embedded; CPU per run at c=8:")
    for t in targets:
        rate = med(t.rates)
        p50 = med([p(s, 0.5) for s in t.parallel])
        seq = med([p(s, 0.5) for s in t.serial])
        print(
            f"    {t.name:<38} c=8 {rate:5.1f} runs/s = {rate / cores:4.1f}/core "
            f"({rate / base_rate:4.0%}), p50 {p50:6.1f} ms ({p50 / base_p50:4.2f}x); "
            f"sequential p50 {seq:5.1f} ms ({seq / base_seq:4.2f}x); CPU/run server+sandboxes "
            f"{med(t.server_ms):4.1f} ms, postgres+redis {med(t.store_ms):4.1f} ms"
        )


def main() -> None:
    server, url, token = start_embedded()
    stack = ComposeStack(webs=1, workers=1, extra_env={"UNDOABLE_LOG_LEVEL": "WARNING"})
    host_server = None
    try:
        started = time.monotonic()
        stack.start()
        print(f"compose stack up in {time.monotonic() - started:.0f} s", flush=True)
        ctoken = compose_token(stack)
        stack.published = True
        published = stack.web_url(0)
        stack.published = False
        pg, rd = stack.containers("postgres")[0], stack.containers("redis")[0]
        password = stack.env["POSTGRES_PASSWORD"]
        host_server, host_url, _ = start_embedded(
            {
                "DATABASE_URL": f"postgres://undoable:{password}@{stack.address(pg)}:5432/undoable",
                "REDIS_URL": f"redis://{stack.address(rd)}:6379/0",
                "DJANGO_SECRET_KEY": stack.env["DJANGO_SECRET_KEY"],
            }
        )
        web_cpu = container_cpu(stack.containers("web")[0])
        # The published port's CPU includes its userland proxy, a host process.
        proxy = proxy_pid(stack.web_ports[0])
        stores_cpu = container_cpu(pg, rd)
        targets = [
            Target("embedded (make run)", url, token, process_cpu(server.pid)),
            Target("compose web, container address", stack.web_url(0), ctoken, web_cpu, stores_cpu),
            Target(
                "compose web, published port",
                published,
                ctoken,
                summed(web_cpu, *([process_cpu(proxy)] if proxy else [])),
                stores_cpu,
            ),
            Target(
                "host server, compose's postgres+redis",
                host_url,
                ctoken,
                process_cpu(host_server.pid),
                stores_cpu,
            ),
        ]
        for target in targets:  # configure the executor, fill the warm pools
            conn = connect(target.url)
            for _ in range(20):
                exec_once(conn, target.token)
            conn.close()
        floors = []
        for round_ in range(ROUNDS):
            floors.append(floor_ms())
            for target in targets:
                time.sleep(1.0)  # let the previous target's sandboxes go and pools refill
                sequential(target)
                time.sleep(1.0)
                concurrent(target)
            print(f"round {round_ + 1} done", flush=True)
        report(targets, floors)
    finally:
        for proc in (server, host_server):
            if proc is not None:
                proc.terminate()
                proc.wait(10)
        stack.stop()


if __name__ == "__main__":
    main()
