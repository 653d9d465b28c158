"""The asyncio flavour: the same calls as Client and Session, awaitable.

Each call runs the synchronous client on a worker thread (asyncio.to_thread), so the event loop
never blocks on the network and both flavours share one implementation of the protocol,
retries included.

    client = AsyncClient("http://127.0.0.1:8000", "udb_...")
    result = await client.exec("print(1+1)")
    async with await client.session() as s:
        await s.exec("x = 21")
        (await s.exec("x * 2")).stdout      # "42\\n"
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from undoable_client.actions import Action
from undoable_client.client import Client, Session
from undoable_client.models import ExecResult


class AsyncClient:
    """`AsyncClient(url, token)`, with the keyword arguments of Client."""

    def __init__(self, url: str, token: str, **options: Any) -> None:
        self.sync = Client(url, token, **options)

    async def exec(self, code: str, **options: Any) -> ExecResult:
        """Run `code` once in a fresh sandbox; the keyword arguments of Client.exec."""
        return await asyncio.to_thread(self.sync.exec, code, **options)

    async def session(self) -> AsyncSession:
        """Start a stateful session; `async with await client.session() as s:` deletes it."""
        return AsyncSession(await asyncio.to_thread(self.sync.session))

    async def action(self, kind: str, forward_code: str, **options: Any) -> AsyncAction:
        """Run an action; the keyword arguments of Client.action (`on_output` is called on a
        worker thread)."""
        return AsyncAction(await asyncio.to_thread(self.sync.action, kind, forward_code, **options))

    async def get_action(self, action_id: int) -> AsyncAction:
        return AsyncAction(await asyncio.to_thread(self.sync.get_action, action_id))


class AsyncAction:
    """An Action whose keep, discard, undo, refresh and wait are awaitable; `data`, `status`
    and the other fields read the last answer."""

    def __init__(self, action: Action) -> None:
        self.sync = action

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sync, name)

    async def keep(self) -> AsyncAction:
        await asyncio.to_thread(self.sync.keep)
        return self

    async def discard(self) -> AsyncAction:
        await asyncio.to_thread(self.sync.discard)
        return self

    async def undo(self, credentials: dict[str, str] | None = None) -> AsyncAction:
        await asyncio.to_thread(self.sync.undo, credentials)
        return self

    async def refresh(self) -> AsyncAction:
        await asyncio.to_thread(self.sync.refresh)
        return self

    async def wait(self, timeout_s: float = 300.0) -> AsyncAction:
        await asyncio.to_thread(self.sync.wait, timeout_s)
        return self


class AsyncSession:
    """A live sandbox whose Python state and files persist between calls."""

    def __init__(self, session: Session) -> None:
        self.sync = session
        self.id = session.id
        self.expires_at = session.expires_at

    async def exec(self, code: str, *, language: str = "python",
                   timeout_s: float | None = None) -> ExecResult:  # fmt: skip
        return await asyncio.to_thread(self.sync.exec, code, language=language, timeout_s=timeout_s)

    async def bash(self, command: str, *, timeout_s: float | None = None) -> ExecResult:
        return await asyncio.to_thread(self.sync.bash, command, timeout_s=timeout_s)

    async def write_file(self, path: str, data: bytes | str) -> None:
        await asyncio.to_thread(self.sync.write_file, path, data)

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self.sync.read_file, path)

    async def list_files(self, path: str = "") -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.sync.list_files, path)

    async def delete_file(self, path: str) -> None:
        await asyncio.to_thread(self.sync.delete_file, path)

    async def close(self) -> None:
        """Delete the session (its sandbox is killed, its files are gone)."""
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:  # fmt: skip
        await self.close()
