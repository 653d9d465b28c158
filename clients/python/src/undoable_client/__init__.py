"""Python client for Undoable's agent API, on httpx.

    from undoable_client import Client
    client = Client("http://127.0.0.1:8000", "udb_...")
    client.exec("print(1+1)").stdout            # "2\\n"
    with client.session() as s:
        s.exec("x = 21")
        s.exec("x * 2").stdout                  # "42\\n"
        s.write_file("data.csv", b"a,b\\n1,2\\n")
        s.read_file("data.csv")

    action = client.action("fs", "open('joke.txt','w').write('hi')", on_stdout=print)
    action.status                               # "pending"
    action.keep()                               # or .discard(), .undo(credentials)

AsyncClient is the same, awaitable, on httpx's asyncio client. Failed requests raise a subclass
of ApiError (AuthError, QuotaExceeded, SessionLost, ActionRefused, ...); a 429, and a 503 to a
call safe to repeat, is retried after the server's Retry-After first. `undoable_client.tools` is
an OpenAI tool for running code, `undoable_client.codeact` a CodeAct loop on one session.
"""

from __future__ import annotations

# typing itself is a cost on every start of `undoable`: imported by type checkers only.
TYPE_CHECKING = False

# Names load on first use (PEP 562), so `import undoable_client.cli` and `undoable --help`
# do not pay for httpx.
_HOMES = {
    "Action": "actions",
    "Workspace": "actions",
    "AsyncAction": "async_client",
    "AsyncClient": "async_client",
    "AsyncSession": "async_client",
    "AsyncWorkspace": "async_client",
    "Client": "client",
    "Session": "client",
    "ExecResult": "models",
    "Image": "models",
    **dict.fromkeys(
        (
            "ActionRefused",
            "ApiError",
            "AuthError",
            "BadRequest",
            "Conflict",
            "ConnectionFailed",
            "NotFound",
            "QuotaExceeded",
            "ServerError",
            "SessionLost",
            "TooLarge",
            "Unavailable",
        ),
        "errors",
    ),  # fmt: skip
}

if TYPE_CHECKING:
    from typing import Any

    from undoable_client.actions import Action, Workspace
    from undoable_client.async_client import (
        AsyncAction,
        AsyncClient,
        AsyncSession,
        AsyncWorkspace,
    )
    from undoable_client.client import Client, Session
    from undoable_client.errors import (
        ActionRefused,
        ApiError,
        AuthError,
        BadRequest,
        Conflict,
        ConnectionFailed,
        NotFound,
        QuotaExceeded,
        ServerError,
        SessionLost,
        TooLarge,
        Unavailable,
    )
    from undoable_client.models import ExecResult, Image


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'undoable_client' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"undoable_client.{home}"), name)


__all__ = [
    "Action",
    "ActionRefused",
    "ApiError",
    "AsyncAction",
    "AsyncClient",
    "AsyncSession",
    "AsyncWorkspace",
    "AuthError",
    "BadRequest",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "ExecResult",
    "Image",
    "NotFound",
    "QuotaExceeded",
    "ServerError",
    "Session",
    "SessionLost",
    "TooLarge",
    "Unavailable",
    "Workspace",
]
__version__ = "0.2.0"
