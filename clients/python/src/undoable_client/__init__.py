"""Python client for Undoable's agent API. Standard library only.

    from undoable_client import Client
    client = Client("http://127.0.0.1:8000", "udb_...")
    client.exec("print(1+1)").stdout            # "2\\n"
    with client.session() as s:
        s.exec("x = 21")
        s.exec("x * 2").stdout                  # "42\\n"
        s.write_file("data.csv", b"a,b\\n1,2\\n")
        s.read_file("data.csv")

    action = client.action("fs", "open('joke.txt','w').write('hi')", on_output=print)
    action.status                               # "pending"
    action.keep()                               # or .discard(), .undo(credentials)

AsyncClient is the same, awaitable. Failed requests raise ApiError;
429 and 503 are retried after the server's Retry-After first. `undoable_client.tools` is an
OpenAI tool for running code, `undoable_client.codeact` a CodeAct loop on one session.
"""

from undoable_client.actions import Action, Workspace
from undoable_client.async_client import AsyncAction, AsyncClient, AsyncSession
from undoable_client.client import Client, Session
from undoable_client.models import ApiError, ExecResult, Image

__all__ = [
    "Action",
    "ApiError",
    "AsyncAction",
    "AsyncClient",
    "AsyncSession",
    "Client",
    "ExecResult",
    "Image",
    "Session",
    "Workspace",
]
__version__ = "0.1.0"
