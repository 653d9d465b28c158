"""The actions API's cost: POST /api/v1/actions for a one-file fs change until it answers
`pending`, against the same fs run through the web flow (the query page's POST of a run, then
its websocket until the run's final status, when the change is pending) and against a plain
POST /api/v1/exec of the same program; then Keep and Undo (the reverse program run and its
change kept) p50. One real server process (bench_api.served_env), the three interleaved so the
machine's load is shared alike. Target (issue 43): the action within 1.1x of the web flow.

    .venv/bin/python tests/bench/bench_actions.py
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a plain script from anywhere

from tests.bench.bench_api import manage, served_env  # noqa: E402
from tests.local_servers import signed_in_session_script  # noqa: E402

RUNS = int(os.environ.get("BENCH_ACTION_RUNS", "30"))
WARM = 5
CODE = "open('joke.txt', 'w').write('knock knock\\n')\n"
REVERSE = "import os\nos.remove('joke.txt')\n"
FINAL = ("succeeded", "failed", "stopped", "timed_out")

# The web flow's user: a signed-in session and one fs query with a workspace of its own per
# run (a workspace holds one pending change at a time).
WEB_SETUP = signed_in_session_script("web", "bench-not-used-43") + (
    "from webapp.queries.models import Query\n"
    "from webapp.workspaces import services as workspaces\n"
    "for _ in range({count}):\n"
    "    query = Query.objects.create(owner=user, prompt='bench', kind='fs', forward_code='')\n"
    "    workspace = workspaces.workspace_create(owner=user)\n"
    "    workspaces.workspace_attach(query=query, workspace=workspace)\n"
    "    print(query.pk)\n"
)


class Bench:
    def __init__(self, port: int, token: str, session_key: str) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.api_headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        csrf = secrets.token_hex(16)
        self.session_key = session_key
        self.web_headers = {
            "Content-Type": "application/json",
            "X-CSRFToken": csrf,
            "Cookie": f"sessionid={session_key}; csrftoken={csrf}",
        }

    def post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        return json.loads(self.post_raw(path, body, headers))

    def post_raw(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
        self.conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        response = self.conn.getresponse()
        text = response.read()
        if response.status not in (200, 201):
            raise SystemExit(f"{path}: {response.status} {text[:300]!r}")
        return text

    def action(self) -> tuple[float, int]:
        body = {"kind": "fs", "forward_code": CODE, "reverse_code": REVERSE}
        start = time.perf_counter()
        action = self.post("/api/v1/actions", body, self.api_headers)
        elapsed = time.perf_counter() - start
        if action["status"] != "pending":
            raise SystemExit(f"the action is {action['status']}: {action['error']}")
        return elapsed, action["id"]

    def decide(self, action_id: int, verb: str, expect: str) -> float:
        start = time.perf_counter()
        action = self.post(f"/api/v1/actions/{action_id}/{verb}", {}, self.api_headers)
        elapsed = time.perf_counter() - start
        if action["status"] != expect:
            raise SystemExit(f"{verb}: the action is {action['status']}: {action['error']}")
        return elapsed

    def exec(self) -> float:
        start = time.perf_counter()
        self.post_raw("/api/v1/exec", {"code": CODE}, self.api_headers)  # stdout, plain text
        return time.perf_counter() - start

    def web(self, query_id: int) -> float:
        start = time.perf_counter()
        body = {"direction": "forward", "forward_code": CODE, "credentials": {}}
        run = self.post(f"/queries/{query_id}/runs", body, self.web_headers)
        status = asyncio.run(self._final_status(run["ws_path"]))
        elapsed = time.perf_counter() - start
        if status != "succeeded":
            raise SystemExit(f"the web run is {status}")
        return elapsed

    async def _final_status(self, ws_path: str) -> str:
        url = f"ws://127.0.0.1:{self.port}{ws_path}?after=0"
        origin = f"http://127.0.0.1:{self.port}"
        cookie = {"Cookie": f"sessionid={self.session_key}"}
        async with connect(url, origin=origin, additional_headers=cookie) as ws:
            async for raw in ws:
                message = json.loads(raw)
                if message["type"] == "status" and message["status"] in FINAL:
                    return str(message["status"])
        return "disconnected"


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    with served_env(("bench",)) as (port, tokens, env):
        count = RUNS + WARM
        out = manage(env, "shell", "-c", WEB_SETUP.format(count=count)).split()
        session_key, query_ids = out[-count - 1], [int(q) for q in out[-count:]]
        bench = Bench(port, tokens["bench"], session_key)
        figures: dict[str, list[float]] = {"web": [], "action": [], "exec": [], "keep": []}
        figures["undo"] = []
        for n, query_id in enumerate(query_ids):
            web = bench.web(query_id)
            action, action_id = bench.action()
            plain = bench.exec()
            keep = bench.decide(action_id, "keep", "kept")
            undo = bench.decide(action_id, "undo", "reversed")
            if n >= WARM:  # the first ones configure the executor and fill the warm pool
                for name, value in zip(
                    ("web", "action", "exec", "keep", "undo"),
                    (web, action, plain, keep, undo),
                    strict=True,
                ):
                    figures[name].append(value)
        bench.conn.close()
    web, action, plain = (p50_ms(figures[name]) for name in ("web", "action", "exec"))
    print(f"bench_actions ({RUNS} of each, interleaved; a one-file fs change)")
    print(f"  web flow: run -> websocket final status  p50 {web:7.1f} ms")
    print(
        f"  API action create -> pending           p50 {action:7.1f} ms"
        f"  ({action / web:.2f}x the web flow; target <= 1.1x)"
    )
    print(
        f"  API plain exec of the same program     p50 {plain:7.1f} ms"
        f"  (the action is {action / plain:.2f}x it)"
    )
    print(f"  API keep                               p50 {p50_ms(figures['keep']):7.1f} ms")
    print(f"  API undo (reverse program, kept)       p50 {p50_ms(figures['undo']):7.1f} ms")


if __name__ == "__main__":
    main()
