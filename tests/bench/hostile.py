"""A hostile tenant against the web processes of `make loadtest`, as a process of its own.

`python tests/bench/hostile.py CONFIG_JSON` keeps up, until its stdin closes or its deadline
passes: idle TCP connections that never send a byte (reopened when the server drops them), a
flood of stateless execs far above its token's rate and concurrency caps (ignoring Retry-After),
sleeping runs at the maximum timeout that fill a second token's concurrency, and a session (a
third token) whose cells print as much as they may: one user, three tokens. It prints `ready`
once all of that is going, and at the end one JSON line of what it got. A process of its own, so
that its client work shares no event loop with the well-behaved tenant's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import sys
import time
from collections import Counter
from typing import Any

import httpx

SLEEP_CODE = "import time; time.sleep(20)"
# The tenant connects from 127.0.0.2 and up, as from machines of its own: the well-behaved
# tenant is on 127.0.0.1, and the server caps connections per client address (webapp.server.serve),
# 256 by default, under which each of these addresses stays at each web process.
FLOOD_ADDRESS, CLIENT_ADDRESS = "127.0.0.2", "127.0.0.3"
IDLE_ADDRESSES = [f"127.0.0.{n}" for n in range(4, 12)]
FLOOD_CONNECTIONS = 64  # far above a token's 16 runs at once and 8 waiting
CELL_FLOOD_CODE = "for _ in range(200): print('x' * 100_000)"


async def raw_post(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, token: str, code: str
) -> int:
    """POST /api/v1/exec on a keep-alive connection; the answer's status (its body is read and
    dropped)."""
    body = json.dumps({"code": code}).encode()
    writer.write(
        f"POST /api/v1/exec HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    status = int(head.split(" ", 2)[1])
    headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
            await reader.readexactly(size + 2)
        await reader.readuntil(b"\r\n")
    else:
        raise ValueError("an answer without a length")
    return status


class Hostile:
    def __init__(self, config: dict[str, Any]) -> None:
        self.webs: list[str] = config["webs"]
        self.flood_token: str = config["flood_token"]
        self.sleep_token: str = config["sleep_token"]
        self.session_token: str = config["session_token"]
        self.idle_sockets: int = config["idle_sockets"]
        self.flood_rate: float = config["flood_rate"]
        self.sleepers: int = config["sleepers"]
        self.max_timeout_s: float = config["max_timeout_s"]
        self.deadline = time.monotonic() + config["max_duration_s"]
        self.counts: Counter[str] = Counter()
        self.stopping = asyncio.Event()
        self.clients = [
            httpx.AsyncClient(
                base_url=url,
                timeout=self.max_timeout_s + 10,
                transport=httpx.AsyncHTTPTransport(
                    local_address=CLIENT_ADDRESS,
                    limits=httpx.Limits(max_connections=200, max_keepalive_connections=200),
                ),
            )
            for url in self.webs
        ]

    async def idle_socket(self, index: int) -> None:
        host, port = self.webs[index % len(self.webs)].removeprefix("http://").split(":")
        source = (IDLE_ADDRESSES[index // len(self.webs) % len(IDLE_ADDRESSES)], 0)
        while not self.stopping.is_set():
            try:
                reader, writer = await asyncio.open_connection(host, int(port), local_addr=source)
            except OSError:
                self.counts["idle_refused"] += 1
                await asyncio.sleep(1)  # pacing a reconnect: no event to wait on
                continue
            self.counts["idle_opened"] += 1
            try:
                if not await reader.read(1):
                    self.counts["idle_dropped_by_server"] += 1
            except OSError:
                self.counts["idle_dropped_by_server"] += 1
            finally:
                writer.close()

    async def post(self, index: int, path: str, token: str, body: dict[str, Any]) -> int:
        try:
            reply = await self.clients[index % len(self.clients)].post(
                path, json=body, headers={"Authorization": f"Bearer {token}"}
            )
        except httpx.HTTPError:
            return 0
        return reply.status_code

    async def flood(self) -> None:
        """FLOOD_CONNECTIONS keep-alive connections share `flood_rate` requests/s, each sending
        its next request as soon as it is due and the previous one answered. Raw HTTP/1.1: with
        httpx this client spent more of the 2 cores than the requests it was making."""
        per_connection_s = FLOOD_CONNECTIONS / self.flood_rate

        async def connection(index: int) -> None:
            host, port = self.webs[index % len(self.webs)].removeprefix("http://").split(":")
            streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
            n, began = index, time.monotonic()
            while not self.stopping.is_set():
                self.counts["flood_sent"] += 1
                try:
                    if streams is None:
                        streams = await asyncio.open_connection(
                            host, int(port), local_addr=(FLOOD_ADDRESS, 0)
                        )
                    status = await raw_post(*streams, host, self.flood_token, f"print({n})")
                except (OSError, ValueError, asyncio.IncompleteReadError):
                    status, streams = 0, None
                self.counts[f"flood_{status}"] += 1
                n += FLOOD_CONNECTIONS
                began += per_connection_s
                await asyncio.sleep(max(0.0, began - time.monotonic()))
            if streams is not None:
                streams[1].close()

        await asyncio.gather(*(connection(i) for i in range(FLOOD_CONNECTIONS)))

    async def sleeper(self, index: int) -> None:
        body = {"code": SLEEP_CODE, "timeout_s": self.max_timeout_s}
        while not self.stopping.is_set():
            self.counts["sleep_sent"] += 1
            status = await self.post(index, "/api/v1/exec", self.sleep_token, body)
            self.counts[f"sleep_{status}"] += 1
            if status != 200:
                await asyncio.sleep(1)  # a refused sleeper tries again a second later

    async def cell_flood(self) -> None:
        client, auth = self.clients[0], {"Authorization": f"Bearer {self.session_token}"}
        created = await client.post("/api/v1/sessions", headers=auth)
        if created.status_code != 201:
            self.counts[f"session_create_{created.status_code}"] += 1
            return
        path = f"/api/v1/sessions/{created.json()['id']}"
        try:
            while not self.stopping.is_set():
                self.counts["cell_sent"] += 1
                try:
                    reply = await client.post(
                        f"{path}/exec", json={"code": CELL_FLOOD_CODE}, headers=auth
                    )
                    self.counts[f"cell_{reply.status_code}"] += 1
                except httpx.HTTPError:
                    self.counts["cell_0"] += 1
        finally:
            with contextlib.suppress(httpx.HTTPError):
                await client.delete(path, headers=auth)

    async def run(self) -> None:
        tasks = [asyncio.ensure_future(self.idle_socket(i)) for i in range(self.idle_sockets)]
        tasks += [asyncio.ensure_future(self.sleeper(i)) for i in range(self.sleepers)]
        tasks += [asyncio.ensure_future(self.cell_flood())]
        while self.counts["idle_opened"] + self.counts["idle_refused"] < self.idle_sockets:
            await asyncio.sleep(0.05)  # polling our own counter: the sockets open as they may
        if self.flood_rate > 0:
            tasks.append(asyncio.ensure_future(self.flood()))
        print("ready", flush=True)
        stdin = asyncio.StreamReader()
        await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin
        )
        stdin_closed = asyncio.ensure_future(stdin.read())
        await asyncio.wait([stdin_closed], timeout=max(0.0, self.deadline - time.monotonic()))
        stdin_closed.cancel()
        self.stopping.set()
        # Idle sockets and sleepers wait on the server: cancel them; the flood and the session
        # cell stop at their next turn, the session is deleted.
        for task in tasks[: self.idle_sockets + self.sleepers]:
            task.cancel()
        await asyncio.wait(tasks, timeout=30)
        for client in self.clients:
            await client.aclose()
        print(json.dumps(dict(self.counts)), flush=True)


def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(Hostile(json.loads(sys.argv[1])).run())


if __name__ == "__main__":
    main()
