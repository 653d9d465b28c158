"""`make loadtest`: the production topology under load, on loopback only, bounded in count and time.

Starts the topology of the fault suite (PostgreSQL, Redis, two web processes, two Celery
workers with 8 run slots each: tests/fault/topology.py), then:
  1. LOAD_EXEC_RUNS (2,000) stateless runs, POST /api/v1/exec, spread over both web processes;
  2. LOAD_WEB_RUNS (200) web runs (POST /queries/<id>/runs, followed on the run websocket until
     final), executed by the two workers;
both at concurrency 16; then
  3. the fairness phase (tests/bench/fairness.py): a fixed-rate stateless load from well-behaved
     users, alone and then beside a hostile tenant (idle sockets, an exec flood, sleeping runs, a
     printing session), and the ratio of its p99s (target <= 2x).
Prints throughput and p50/p99 of each phase, then the counts that must be zero: lost runs (no
final status or "Worker lost"/"Never started"), runs stuck in a non-final state after the load,
leaked sandboxes (this topology's bwrap processes still alive after web and workers stopped),
and requests the web processes cut with no answer as they stopped. Exits 1 if any of these is
not zero or a request failed; the fairness ratio is a
figure against a target, printed with "met" or "MISSED", not asserted (the standards: speed is
measured, never a timed assertion). LOAD_SKIP_FIRST=1 runs only the fairness phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench import fairness  # noqa: E402
from tests.fault.client import WebClient  # noqa: E402
from tests.fault.topology import Topology, wait_until  # noqa: E402

EXEC_RUNS = int(os.environ.get("LOAD_EXEC_RUNS", "2000"))
WEB_RUNS = int(os.environ.get("LOAD_WEB_RUNS", "200"))
CONCURRENCY = 16
DEADLINE_S = float(os.environ.get("LOAD_DEADLINE_S", "900"))
SKIP_FIRST = os.environ.get("LOAD_SKIP_FIRST") == "1"
# The per-token rate and concurrency caps are the defaults (the rate from the machine's cores,
# webapp/admission/capacity.py; 16 at once), which the first phase's one token at concurrency 16
# stays within, and the hostile tenant's flood is not.
# What uvicorn logs when it cancels requests still in flight at the end of its grace period
# (their clients get no answer or a 500): a stopping web process must never
# (webapp.server.draining).
CUT_MARKS = ("timeout graceful shutdown exceeded", "Exception in ASGI application")
ENV = {
    "EXECUTOR_WARM_POOL_SIZE": "4",
    "UNDOABLE_LOG_LEVEL": "WARNING",
}


def percentiles(samples: list[float]) -> str:
    if not samples:
        return "no samples"
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return f"p50 {cuts[49] * 1000:.1f} ms, p99 {cuts[98] * 1000:.1f} ms"


async def exec_phase(topo: Topology, token: str) -> tuple[list[float], int, float]:
    latencies: list[float] = []
    failures = 0
    todo = iter(range(EXEC_RUNS))
    clients = [httpx.AsyncClient(base_url=topo.web_url(i), timeout=60) for i in range(2)]

    async def worker(slot: int) -> None:
        nonlocal failures
        client = clients[slot % 2]
        for n in todo:
            started = time.perf_counter()
            reply = await client.post(
                "/api/v1/exec",
                json={"code": f"print({n} * 2)"},
                headers={"Authorization": f"Bearer {token}"},
            )
            latencies.append(time.perf_counter() - started)
            if reply.status_code != 200 or reply.text != f"{n * 2}\n":
                failures += 1
                print(f"exec {n}: HTTP {reply.status_code} {reply.text[:200]!r}", flush=True)

    began = time.perf_counter()
    await asyncio.gather(*(worker(slot) for slot in range(CONCURRENCY)))
    elapsed = time.perf_counter() - began
    for client in clients:
        await client.aclose()
    return latencies, failures, elapsed


def web_phase(topo: Topology, username: str, password: str) -> tuple[list[float], int, float]:
    browsers = [
        WebClient(topo.web_url(slot % 2)).login(username, password) for slot in range(CONCURRENCY)
    ]
    queries = [browser.query_by_hand() for browser in browsers]
    latencies: list[float] = []
    failures = 0
    todo = iter(range(WEB_RUNS))

    async def worker(slot: int) -> None:
        nonlocal failures
        browser = browsers[slot]
        for n in todo:
            started = time.perf_counter()
            run_id = await asyncio.to_thread(browser.run, queries[slot], f"print('web', {n})")
            try:
                chunks, status = await browser._watch(run_id, 0, "final", 120)
            except TimeoutError:
                # Counted, not fatal: the final database check below says whether the run
                # itself is stuck or only its websocket watch missed the end.
                print(f"web run {run_id}: no final status over the websocket in 120 s", flush=True)
                failures += 1
                continue
            latencies.append(time.perf_counter() - started)
            text = "".join(c["text"] for c in chunks)
            if status.get("status") != "succeeded" or text != f"web {n}\n":
                failures += 1

    async def main() -> None:
        await asyncio.gather(*(worker(slot) for slot in range(CONCURRENCY)))

    began = time.perf_counter()
    asyncio.run(main())
    return latencies, failures, time.perf_counter() - began


def first_phases(topo: Topology, token: str, username: str, password: str) -> tuple[int, int]:
    lat, exec_failures, elapsed = asyncio.run(asyncio.wait_for(exec_phase(topo, token), DEADLINE_S))
    print(
        f"stateless: {len(lat)} runs in {elapsed:.1f} s = {len(lat) / elapsed:.1f} runs/s, "
        f"{percentiles(lat)}, failed {exec_failures}",
        flush=True,
    )
    lat, web_failures, elapsed = web_phase(topo, username, password)
    print(
        f"web runs: {len(lat)} runs in {elapsed:.1f} s = {len(lat) / elapsed:.1f} runs/s, "
        f"{percentiles(lat)} (submit to final status), failed {web_failures}",
        flush=True,
    )
    return exec_failures, web_failures


def main() -> int:
    started = time.monotonic()
    topo = Topology(webs=2, workers=2, worker_concurrency=CONCURRENCY // 2, extra_env=ENV)
    topo.start()
    try:
        username, password = "load", secrets.token_urlsafe(12)
        topo.manage(
            "shell",
            "-c",
            "from django.contrib.auth import get_user_model; "
            f"get_user_model().objects.create_user({username!r}, password={password!r})",
        )
        token = topo.manage("create_api_token", username).strip()
        print(f"topology up in {time.monotonic() - started:.1f} s", flush=True)

        exec_failures = web_failures = 0
        if not SKIP_FIRST:
            exec_failures, web_failures = first_phases(topo, token, username, password)
        fair = asyncio.run(asyncio.wait_for(fairness.compare(topo), DEADLINE_S))
        final = "('succeeded','failed','timed_out','cancelled')"
        unfinished = f"SELECT count(*) FROM queries_run WHERE status NOT IN {final}"
        with contextlib.suppress(TimeoutError):  # counted as stuck below
            wait_until(lambda: topo.sql(unfinished)[0][0] == 0, timeout_s=60, what="final runs")
        stuck = topo.sql(unfinished)[0][0]
        lost = topo.sql(
            "SELECT count(*) FROM queries_run WHERE error LIKE 'Worker lost%%' "
            "OR error LIKE 'Never started%%'"
        )[0][0]
        total = topo.sql("SELECT count(*) FROM queries_run")[0][0]
        lost += max(0, (0 if SKIP_FIRST else WEB_RUNS) - int(total))  # runs the web never recorded
        for name in ["web0", "web1", *topo.worker_names]:
            topo._terminate(name)
        with contextlib.suppress(TimeoutError):  # counted as leaked below
            wait_until(lambda: not topo.sandboxes(), timeout_s=30, what="sandboxes to end")
        leaked = len(topo.sandboxes())
        cut = sum(topo.log(name).count(mark) for name in ["web0", "web1"] for mark in CUT_MARKS)
        print(f"lost runs: {lost}, stuck runs: {stuck}, leaked sandboxes: {leaked}")
        print(f"requests cut with no answer as the web processes stopped: {cut}")
        print(f"total time {time.monotonic() - started:.1f} s")
        bad = lost or stuck or leaked or cut or exec_failures or web_failures or not fair
        if bad:
            for name in ["web0", "web1", *topo.worker_names]:
                errors = [line for line in topo.log(name).splitlines() if '"ERROR"' in line]
                print(f"--- {name}: {len(errors)} error line(s)\n" + "\n".join(errors[-2:]))
        return 1 if bad else 0
    finally:
        topo.stop()


if __name__ == "__main__":
    sys.exit(main())
