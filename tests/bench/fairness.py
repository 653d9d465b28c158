"""The last phase of `make loadtest`: a well-behaved load alone, then beside a hostile tenant.

LOAD_TENANTS (4) users, one token each, send stateless `print(i)` execs at LOAD_RATE (20) runs/s
in all, spread over both web processes, for LOAD_PHASE_S (30) seconds: once alone, then while
tests/bench/hostile.py (a process of its own) holds LOAD_IDLE_SOCKETS (1,000) idle connections,
floods at LOAD_FLOOD_RATE (200; 0: no flood) requests/s, keeps LOAD_SLEEPERS (16) sleeping runs
and a printing session going.
The load is open: each request leaves at its scheduled time whether or not earlier ones came
back, and its latency counts from that time, so a server that stalls cannot hide the stall by
slowing the sender. Target: the well-behaved p99 with the hostile tenant within 2x of without.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.fault.topology import Topology

TENANTS = int(os.environ.get("LOAD_TENANTS", "4"))
RATE = float(os.environ.get("LOAD_RATE", "20"))
PHASE_S = float(os.environ.get("LOAD_PHASE_S", "30"))
IDLE_SOCKETS = int(os.environ.get("LOAD_IDLE_SOCKETS", "1000"))
FLOOD_RATE = float(os.environ.get("LOAD_FLOOD_RATE", "200"))
SLEEPERS = int(os.environ.get("LOAD_SLEEPERS", "16"))  # the default per-token concurrency cap
MAX_TIMEOUT_S = 60.0  # EXECUTOR_WALL_TIME_S's default: the longest run a token may ask for
FLOOR = ["/usr/bin/python3", "-I", "-S", "-c", "print(1+1)"]


@dataclass
class Figures:
    latencies: list[float]
    failures: int
    elapsed_s: float

    def cut(self, percent: int) -> float:
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[percent - 1]

    def line(self) -> str:
        if len(self.latencies) < 2:
            return f"{len(self.latencies)} runs, failed {self.failures}"
        return (
            f"{len(self.latencies)} runs, {len(self.latencies) / self.elapsed_s:.1f} runs/s, "
            f"p50 {self.cut(50) * 1000:.1f} ms, p99 {self.cut(99) * 1000:.1f} ms, "
            f"failed {self.failures}"
        )


def floor_ms() -> float:
    """The bare interpreter's start, this machine's speed right now (it drifts within an hour)."""
    samples = []
    for _ in range(20):
        began = time.perf_counter()
        subprocess.run(FLOOR, capture_output=True, check=True)
        samples.append(time.perf_counter() - began)
    return statistics.median(samples) * 1000


async def well_behaved(topo: Topology, tokens: list[str]) -> Figures:
    clients = [
        httpx.AsyncClient(
            base_url=topo.web_url(i),
            timeout=60,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )
        for i in range(len(topo.web_ports))
    ]
    figures = Figures([], 0, PHASE_S)

    async def one(n: int, due: float) -> None:
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        try:
            reply = await clients[n % len(clients)].post(
                "/api/v1/exec",
                json={"code": f"print({n})"},
                headers={"Authorization": f"Bearer {tokens[n % len(tokens)]}"},
            )
        except httpx.HTTPError as exc:
            figures.failures += 1
            print(f"well-behaved exec {n}: {exc!r}", flush=True)
            return
        figures.latencies.append(time.perf_counter() - due)
        if reply.status_code != 200 or reply.text != f"{n}\n":
            figures.failures += 1
            print(f"well-behaved exec {n}: HTTP {reply.status_code} {reply.text[:200]!r}")

    began = time.perf_counter()
    await asyncio.gather(*(one(n, began + n / RATE) for n in range(int(PHASE_S * RATE))))
    figures.elapsed_s = time.perf_counter() - began
    for client in clients:
        await client.aclose()
    return figures


async def beside_hostile(topo: Topology, tokens: list[str], hostile: dict[str, str]) -> Figures:
    config = {
        "webs": [topo.web_url(i) for i in range(len(topo.web_ports))],
        **hostile,
        "idle_sockets": IDLE_SOCKETS,
        "flood_rate": FLOOD_RATE,
        "sleepers": SLEEPERS,
        "max_timeout_s": MAX_TIMEOUT_S,
        "max_duration_s": PHASE_S + 90,  # its own deadline, should this process die
    }
    script = Path(__file__).with_name("hostile.py")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        json.dumps(config),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        ready = await asyncio.wait_for(proc.stdout.readline(), 60)
        if ready.strip() != b"ready":
            raise RuntimeError(f"hostile tenant did not start: {ready!r}")
        figures = await well_behaved(topo, tokens)
        proc.stdin.close()
        got = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    print(f"hostile tenant got: {hostile_line(got)}", flush=True)
    return figures


def hostile_line(got: dict[str, int]) -> str:
    def answers(prefix: str) -> str:
        parts = [
            f"{'no answer' if key == prefix + '0' else key.removeprefix(prefix)}: {n}"
            for key, n in sorted(got.items())
            if key.startswith(prefix) and key != prefix + "sent"
        ]
        return f"{got.get(prefix + 'sent', 0)} sent, HTTP " + (", ".join(parts) or "none")

    return (
        f"idle sockets opened {got.get('idle_opened', 0)}, dropped by the server "
        f"{got.get('idle_dropped_by_server', 0)}, refused {got.get('idle_refused', 0)}; "
        f"flood {answers('flood_')}; sleeping runs {answers('sleep_')} (the rest cut at the end); "
        f"session cells {answers('cell_')}"
    )


def make_tokens(topo: Topology) -> tuple[list[str], dict[str, str]]:
    """One token for each well-behaved user; three for the hostile user (flood, sleepers and
    session, so each fills a concurrency cap of its own)."""
    names = [f"tenant{i}" for i in range(TENANTS)] + ["hostile"]
    script = (
        "import secrets\n"
        "from django.contrib.auth import get_user_model\n"
        "from webapp.agents.tokens import token_create\n"
        f"for name in {names!r}:\n"
        "    user = get_user_model().objects.create_user(name, password=secrets.token_hex())\n"
        "    for _ in range(3 if name == 'hostile' else 1):\n"
        "        print('token', token_create(owner=user, name=name).secret)\n"
    )
    lines = topo.manage("shell", "-c", script).splitlines()  # among log lines, maybe
    out = [line.split()[1] for line in lines if line.startswith("token ")]
    flood, sleep, session = out[TENANTS:]
    return out[:TENANTS], {"flood_token": flood, "sleep_token": sleep, "session_token": session}


async def compare(topo: Topology) -> bool:
    tokens, hostile = make_tokens(topo)
    floor = floor_ms()
    alone = await well_behaved(topo, tokens)
    print(f"well-behaved alone: {alone.line()} (floor {floor:.1f} ms)", flush=True)
    beside = await beside_hostile(topo, tokens, hostile)
    print(f"well-behaved beside the hostile tenant: {beside.line()}", flush=True)
    if len(alone.latencies) < 2 or len(beside.latencies) < 2:
        return False
    ratio = beside.cut(99) / alone.cut(99)
    verdict = "met" if ratio <= 2 else "MISSED"
    print(f"well-behaved p99 ratio: {ratio:.2f}x (target <= 2x: {verdict})", flush=True)
    # A figure against a target is reported, not asserted; failed requests fail the run.
    return not alone.failures and not beside.failures
