"""HTTP round trip of POST /api/v1/exec for print(1+1) against a real server process.

Starts the ASGI app under a real server on 127.0.0.1 (`python -m webapp.server.serve`, as `make run`
does) with its own SQLite database, creates a user and token
through manage.py, warms the sandbox pool, then prints p50/p99 at concurrency 1 and runs/s at
concurrency 8, beside the floor: the bare interpreter (`/usr/bin/python3 -I -S`, no sandbox,
no HTTP) and the ratio. Targets (issue 5): p50 < 15 ms, p99 < 60 ms, >= 60 runs/s.

BENCH_EXEC_VIA=ninja serves exec through Django's handler and its ninja operation instead of
straight from ASGI (tests/bench/ninja_exec_asgi.py), to compare the two.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a plain script from anywhere

from tests.local_servers import free_port  # noqa: E402
from tests.quota_mounts import remove_var_dir  # noqa: E402

PY = sys.executable
# The project's interpreter, also when a bench of its own venv (bench_peers.py) serves the app.
SERVER_PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").is_dir() else PY
SERIAL_RUNS = int(os.environ.get("BENCH_SERIAL_RUNS", "300"))
# Back to back, every request takes a sandbox and the next one must be started: on 2 cores that
# start (~30 ms of CPU) is what bounds the figures. Paced, the pool is full for each request.
PACED_RUNS = int(os.environ.get("BENCH_PACED_RUNS", "100"))
PACE_S = 0.1
PARALLEL_RUNS = int(os.environ.get("BENCH_PARALLEL_RUNS", "480"))
CONCURRENCY = 8
# What the server runs: the deployed app, or exec through Django's handler and ninja.
APPLICATIONS = {
    "direct": "webapp.asgi:application",
    "ninja": "tests.bench.ninja_exec_asgi:application",
}
EXEC_VIA = os.environ.get("BENCH_EXEC_VIA", "direct")
# The server serving each port (served_for), for its CPU time.
SERVERS: dict[int, subprocess.Popen[bytes]] = {}
BODY = json.dumps({"code": "print(1+1)"}).encode()
# The bare interpreter, as bench_executor.py measures it (the `python3` on PATH may be a shim).
FLOOR = ["/usr/bin/python3", "-I", "-S", "-c", "print(1+1)"]


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [SERVER_PY, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.stdout.strip()


def start_server(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    argv = [SERVER_PY, "-m", "webapp.server.serve", "-b", "127.0.0.1", "-p", str(port)]
    argv.append(APPLICATIONS[EXEC_VIA])
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited with {proc.returncode}") from None
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server did not listen on port {port}")


def exec_once(conn: http.client.HTTPConnection, token: str) -> float:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    start = time.perf_counter()
    conn.request("POST", "/api/v1/exec", body=BODY, headers=headers)
    response = conn.getresponse()
    text = response.read()
    elapsed = time.perf_counter() - start
    if response.status != 200 or text != b"2\n":
        raise SystemExit(f"unexpected answer {response.status}: {text[:200]!r}")
    return elapsed


def server_cpu_s(port: int) -> float:
    """The CPU time the server on `port` has used (all its threads; not its sandboxes')."""
    fields = Path(f"/proc/{SERVERS[port].pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def floor_ms() -> float:
    samples = []
    for _ in range(30):
        start = time.perf_counter()
        subprocess.run(FLOOR, capture_output=True, check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def timed_threads(work: Callable[[Callable[[], None]], None], count: int) -> float:
    """Seconds `count` threads take to run `work`, timed from when all are ready: each calls
    the function it is given (a barrier) once its set-up is done, before the timed part."""
    barrier = threading.Barrier(count + 1)
    threads = [threading.Thread(target=work, args=(barrier.wait,)) for _ in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def parallel(port: int, token: str) -> float:
    per_thread = PARALLEL_RUNS // CONCURRENCY

    def worker(ready: Callable[[], None]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        ready()
        for _ in range(per_thread):
            exec_once(conn, token)
        conn.close()

    return per_thread * CONCURRENCY / timed_threads(worker, CONCURRENCY)


@contextmanager
def served() -> Iterator[tuple[int, str]]:
    """The app served on 127.0.0.1 with a database of its own and one user's token: (port,
    token). The server is stopped on exit."""
    with served_for(("bench",)) as (port, tokens):
        yield port, tokens["bench"]


@contextmanager
def served_for(users: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """As served(), with a user and a token for each name: (port, name -> token)."""
    with served_env(users) as (port, tokens, _):
        yield port, tokens


@contextmanager
def served_env(users: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str], dict[str, str]]]:
    """As served_for(), with the environment the server runs in (for more manage.py calls on
    its database): (port, name -> token, env)."""
    var = tempfile.mkdtemp(prefix="undoable-bench-")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.bench.bench_settings",
        "PYTHONPATH": str(ROOT),
        "UNDOABLE_VAR_DIR": var,
        "EXECUTOR_ROOTFS": str(ROOT / "var" / "sandbox-rootfs"),
        "UNDOABLE_LOG_LEVEL": "WARNING",
    }
    manage(env, "migrate", "--noinput")
    create_users = (
        "from django.contrib.auth.models import User\n"
        f"for name in {users!r}:\n    User.objects.create_user(name)"
    )
    manage(env, "shell", "-c", create_users)
    tokens = {name: manage(env, "create_api_token", name).splitlines()[-1] for name in users}
    port = free_port()
    server = SERVERS[port] = start_server(env, port)
    try:
        yield port, tokens, env
    finally:
        del SERVERS[port]
        server.terminate()
        server.wait(10)
        # Its pending changes' quota tmpfs would outlive it (bench_actions leaves some pending).
        remove_var_dir(Path(var))


def main() -> None:
    with served() as (port, token):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(20):  # configures the executor and fills the warm pool
            exec_once(conn, token)
        cpu_before = server_cpu_s(port)
        serial = [exec_once(conn, token) for _ in range(SERIAL_RUNS)]
        serial_cpu_ms = (server_cpu_s(port) - cpu_before) * 1000 / SERIAL_RUNS
        # Back to back drained the pool; paced figures are for the steady state after it.
        time.sleep(2.0)
        paced = []
        cpu_before = server_cpu_s(port)
        for _ in range(PACED_RUNS):  # one request every PACE_S: the warm pool keeps up
            time.sleep(PACE_S)
            paced.append(exec_once(conn, token))
        paced_cpu_ms = (server_cpu_s(port) - cpu_before) * 1000 / PACED_RUNS
        conn.close()
        rate = parallel(port, token)
    floor = floor_ms()
    p50, p99 = percentile(serial, 0.5) * 1000, percentile(serial, 0.99) * 1000
    print(
        f"bench_api ({SERIAL_RUNS} serial runs, {PARALLEL_RUNS} at concurrency 8, "
        f"exec served {EXEC_VIA})"
    )
    print(f"  bare interpreter floor   p50 {floor:7.1f} ms")
    print(
        f"  HTTP exec, concurrency 1 p50 {p50:7.1f} ms  p99 {p99:7.1f} ms"
        f"  (p50 = {p50 / floor:.1f}x floor; target p50 < 15, p99 < 60)"
    )
    print(f"  HTTP exec, concurrency 8 {rate:7.1f} runs/s  (target >= 60)")
    paced50, paced99 = percentile(paced, 0.5) * 1000, percentile(paced, 0.99) * 1000
    print(
        f"  HTTP exec, 10 requests/s p50 {paced50:7.1f} ms  p99 {paced99:7.1f} ms"
        f"  (p50 = {paced50 / floor:.1f}x floor: a warm sandbox for every request)"
    )
    print(
        f"  server CPU per request     {serial_cpu_ms:7.2f} ms back to back, "
        f"{paced_cpu_ms:.2f} ms paced"
    )


if __name__ == "__main__":
    main()
