"""A browser-like client of one web process: local login, hand-written queries, runs, and the
run websocket (`/ws/runs/<id>/?after=<seq>`), plus the agent API with a bearer token."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import websockets

FINAL = {"succeeded", "failed", "timed_out", "cancelled"}


@dataclass
class WebClient:
    base_url: str
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.base_url, timeout=30)

    def login(self, username: str, password: str) -> WebClient:
        self.http.get("/accounts/login/").raise_for_status()
        reply = self.http.post(
            "/accounts/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": self._csrf()},
        )
        assert reply.status_code == 302, f"login failed: {reply.status_code}"
        return self

    def moved_to(self, base_url: str) -> WebClient:
        """The same browser (cookies) talking to another web process."""
        other = WebClient(base_url)
        other.http.cookies = self.http.cookies
        return other

    def _csrf(self) -> str:
        return str(self.http.cookies.get("csrftoken"))

    def query_by_hand(self) -> int:
        reply = self.http.post(
            "/queries/new/by-hand",
            data={"prompt": "fault test", "kind": "python", "csrfmiddlewaretoken": self._csrf()},
        )
        assert reply.status_code == 302, reply.text[:500]
        match = re.search(r"/queries/(\d+)/", reply.headers["location"])
        assert match, reply.headers["location"]
        return int(match.group(1))

    def run(self, query_id: int, code: str) -> int:
        reply = self.http.post(
            f"/queries/{query_id}/runs",
            json={"forward_code": code},
            headers={"X-CSRFToken": self._csrf()},
        )
        assert reply.status_code == 201, reply.text[:500]
        return int(reply.json()["run"]["run_id"])

    def run_status(self, run_id: int) -> dict[str, Any]:
        reply = self.http.get(f"/runs/{run_id}/")
        reply.raise_for_status()
        return dict(reply.json()["run"])

    def watch(
        self, run_id: int, *, after: int = 0, until: str = "final", timeout_s: float = 60
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Follow the run's websocket like the page does, reconnecting with backoff after
        `after` (the last seq seen) when the socket drops; returns (chunks, last status) once
        `until` is seen: "final" (a final status) or a text that appears in the output."""
        return asyncio.run(self._watch(run_id, after, until, timeout_s))

    async def _watch(
        self, run_id: int, after: int, until: str, timeout_s: float
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        chunks: list[dict[str, Any]] = []
        status: dict[str, Any] = {}
        backoff = 0.2
        async with asyncio.timeout(timeout_s):
            while True:
                last = chunks[-1]["seq"] if chunks else after
                try:
                    if await self._follow(run_id, last, until, chunks, status):
                        return chunks, status
                # InvalidHandshake: refused or cut mid-handshake (a web process whose channel
                # layer is still reconnecting to a restarted Redis drops the socket).
                except (websockets.ConnectionClosedError, websockets.InvalidHandshake, OSError):
                    await asyncio.sleep(backoff)  # what the page's reconnect does
                    backoff = min(backoff * 2, 2.0)

    async def _follow(
        self,
        run_id: int,
        after: int,
        until: str,
        chunks: list[dict[str, Any]],
        status: dict[str, Any],
    ) -> bool:
        url = self.base_url.replace("http://", "ws://") + f"/ws/runs/{run_id}/?after={after}"
        cookie = "; ".join(f"{k}={v}" for k, v in self.http.cookies.items())
        async with websockets.connect(
            url, additional_headers={"Cookie": cookie}, origin=self.base_url
        ) as socket:
            async for raw in socket:
                message = json.loads(raw)
                if message["type"] == "chunk":
                    chunks.append(message)
                elif message["type"] == "status":
                    status.clear()
                    status.update(message)
                text = "".join(c["text"] for c in chunks)
                if until == "final" and status.get("status") in FINAL:
                    return True
                if until != "final" and until in text:
                    return True
        return False


def exec_code(base_url: str, token: str, code: str, *, timeout_s: float = 60) -> dict[str, Any]:
    """POST /api/v1/exec and return the JSON result."""
    reply = httpx.post(
        base_url + "/api/v1/exec",
        json={"code": code},
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        timeout=timeout_s,
    )
    assert reply.status_code == 200, reply.text[:500]
    return dict(reply.json())
