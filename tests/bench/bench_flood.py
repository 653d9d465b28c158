"""Two calm users' `print(1+1)` latency alone, then beside a third user's flood of tiny runs.

One server as `make run` starts it (bench_api.served_for: its own SQLite database, the
in-process admission). The calm users each send one run every CALM_PERIOD_S on a connection of
their own; the flood sends runs back to back on FLOOD_CONNECTIONS connections. Prints the calm
users' p50/p99 in both phases, their ratio (issue 14's target: within 2x) and the flood's
runs/s: while the calm users are busy, the flood's runs start at its part of the host's start
rate (webapp.admission.fairshare), not as fast as it can send them.
"""

from __future__ import annotations

import http.client
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a plain script

from tests.bench.bench_api import BODY, served_for  # noqa: E402

PHASE_S = float(os.environ.get("BENCH_FLOOD_PHASE_S", "15"))
CALM_PERIOD_S = 0.1
FLOOD_CONNECTIONS = 8


def post(conn: http.client.HTTPConnection, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn.request("POST", "/api/v1/exec", body=BODY, headers=headers)
    response = conn.getresponse()
    response.read()
    return response.status


def calm(port: int, token: str, until: float, latencies: list[float]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    due = time.perf_counter()
    while due < until:
        time.sleep(max(0.0, due - time.perf_counter()))
        started = time.perf_counter()
        if post(conn, token) != 200:
            raise SystemExit("a calm user's run was refused")
        latencies.append(time.perf_counter() - started)
        due += CALM_PERIOD_S
    conn.close()


def flood(port: int, token: str, until: float, statuses: list[int]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while time.perf_counter() < until:
        statuses.append(post(conn, token))
    conn.close()


def phase(port: int, tokens: dict[str, str], *, with_flood: bool) -> tuple[list[float], int]:
    """The calm users' latencies over PHASE_S, and the flood's runs that ran (200)."""
    until = time.perf_counter() + PHASE_S
    latencies: list[float] = []
    statuses: list[int] = []
    threads = [
        threading.Thread(target=calm, args=(port, tokens[name], until, latencies))
        for name in ("calm1", "calm2")
    ]
    if with_flood:
        threads += [
            threading.Thread(target=flood, args=(port, tokens["flood"], until, statuses))
            for _ in range(FLOOD_CONNECTIONS)
        ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, statuses.count(200)


def cuts_ms(latencies: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[98] * 1000


def main() -> None:
    with served_for(("calm1", "calm2", "flood")) as (port, tokens):
        for token in tokens.values():  # configures the executor and fills the warm pool
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            for _ in range(5):
                post(conn, token)
            conn.close()
        alone, _ = phase(port, tokens, with_flood=False)
        beside, flood_runs = phase(port, tokens, with_flood=True)
    alone50, alone99 = cuts_ms(alone)
    beside50, beside99 = cuts_ms(beside)
    print(f"bench_flood (2 calm users, 1 run each per {CALM_PERIOD_S:g} s; {PHASE_S:g} s phases)")
    print(f"  calm alone              p50 {alone50:6.1f} ms  p99 {alone99:6.1f} ms")
    print(f"  calm beside a flood     p50 {beside50:6.1f} ms  p99 {beside99:6.1f} ms")
    print(f"  p99 ratio {beside99 / alone99:.2f}x (target <= 2x)")
    print(f"  flood ({FLOOD_CONNECTIONS} connections)   {flood_runs / PHASE_S:6.1f} runs/s ran")


if __name__ == "__main__":
    main()
