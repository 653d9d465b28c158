"""Live-output latency: from a line printed inside the sandbox to its arrival at a websocket
client, p50/p99 over 200 lines, for the embedded mode (webapp.server.serve + thread runner +
in-memory layer) and for Celery + Redis (webapp.server.serve + `celery worker` + channels_redis).
Real processes throughout.

    .venv/bin/python tests/bench/bench_stream.py [--lines 200] [--modes embedded,celery]

The sandbox and the client share the host clock, so each line carries time.time() from inside
the sandbox and the client subtracts it from its own time.time() on arrival.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from websockets.asyncio.client import connect

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a plain script from anywhere

from tests.local_servers import (  # noqa: E402
    celery_worker_argv,
    free_port,
    signed_in_session_script,
    wait_until,
)
from tests.servers import RedisServer  # noqa: E402

SETUP = (
    signed_in_session_script("bench", "bench-not-used-77")
    + "from webapp.queries.models import Query\n"
    + "query = Query.objects.create(owner=user, prompt='bench', forward_code=\"print('warm')\")\n"
    + "print(query.pk)\n"
)


def program(lines: int) -> str:
    # Wait a moment so the client is connected before the first line: we measure live delivery.
    return (
        "import time\ntime.sleep(1.0)\n"
        f"for i in range({lines}):\n"
        "    print(i, repr(time.time()), flush=True)\n"
        "    time.sleep(0.01)\n"
    )


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def stack(mode: str) -> Iterator[tuple[str, str, int]]:
    """Start the app (and a worker for celery) on a fresh database; yield (url, session, qid)."""
    var_dir = Path(tempfile.mkdtemp(prefix=f"undoable-bench-{mode}-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "UNDOABLE_VAR_DIR": str(var_dir),
        "EXECUTOR_ROOTFS": str(REPO / "var" / "sandbox-rootfs"),
        "EXECUTOR_WARM_POOL_SIZE": "2",
        "UNDOABLE_LOG_LEVEL": "WARNING",
    }
    env.pop("DATABASE_URL", None)
    redis_server = RedisServer(var_dir / "redis").start() if mode == "celery" else None
    if redis_server is not None:
        env["REDIS_URL"] = redis_server.url()
    else:
        env.pop("REDIS_URL", None)
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True, cwd=REPO)
    out = subprocess.run(
        [*manage, "shell", "-c", SETUP],
        env=env,
        check=True,
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.split()
    session_key, query_id = out[-2], int(out[-1])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    web_log = (var_dir / "web.log").open("wb")
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "webapp.server.serve", "-b", "127.0.0.1", "-p", str(port)],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=web_log,
        )
    ]
    if mode == "celery":
        processes.append(
            subprocess.Popen(
                celery_worker_argv("--concurrency=2", "--loglevel=WARNING"),
                env=env,
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    try:
        wait_until(lambda: healthy(url), timeout_s=60, what="the server")
        yield url, session_key, query_id
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        if redis_server is not None:
            redis_server.stop()
        web_log.close()


def start_run(url: str, session_key: str, query_id: int, code: str) -> int:
    csrf = secrets.token_hex(16)
    request = urllib.request.Request(
        f"{url}/queries/{query_id}/runs",
        data=json.dumps({"direction": "forward", "forward_code": code, "credentials": {}}).encode(),
        headers={
            "Content-Type": "application/json",
            "X-CSRFToken": csrf,
            "Cookie": f"sessionid={session_key}; csrftoken={csrf}",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["run"]["run_id"]


async def collect(
    url: str, session_key: str, run_id: int, *, measure: bool = True
) -> tuple[list[float], str]:
    """Latency in ms of every line of the run, and its final status."""
    ws_url = url.replace("http://", "ws://") + f"/ws/runs/{run_id}/?after=0"
    latencies: list[float] = []
    pending = ""  # a line may arrive in pieces; it has arrived when its newline has
    async with connect(
        ws_url, origin=url, additional_headers={"Cookie": f"sessionid={session_key}"}
    ) as ws:
        async for raw in ws:
            arrived = time.time()
            message = json.loads(raw)
            if measure and message["type"] == "chunk" and message["stream"] == "stdout":
                *complete, pending = (pending + message["text"]).split("\n")
                for line in complete:
                    if len(line.split()) != 2:
                        raise SystemExit(f"unexpected line {line!r} in {message!r}")
                    latencies.append((arrived - float(line.split()[1])) * 1000)
            elif message["type"] == "status" and message["status"] not in ("queued", "running"):
                return latencies, message["status"]
    return latencies, "disconnected"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def bench(mode: str, lines: int) -> None:
    with stack(mode) as (url, session_key, query_id):
        warm = start_run(url, session_key, query_id, "print('warm')")
        asyncio.run(collect(url, session_key, warm, measure=False))
        run_id = start_run(url, session_key, query_id, program(lines))
        latencies, status = asyncio.run(collect(url, session_key, run_id))
    print(
        f"{mode:9s} lines={len(latencies):4d} status={status:9s} "
        f"p50={statistics.median(latencies):7.2f} ms  p99={percentile(latencies, 99):7.2f} ms  "
        f"max={max(latencies):7.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--modes", default="embedded,celery")
    args = parser.parse_args()
    print("bench_stream: sandbox print -> websocket client latency")
    for mode in args.modes.split(","):
        bench(mode, args.lines)


if __name__ == "__main__":
    main()
