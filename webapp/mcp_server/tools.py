"""The MCP tools: exec, sessions and actions, through the services the JSON API uses.

Each tool reads the request's API token (put in the ASGI scope by webapp.mcp_server.asgi once
it checked it), calls what the matching /api/v1 view calls, and answers with the same JSON the
API would give, as text and as structured content; a run's images come as MCP image content.
A request the API would refuse (a limit, a quota, another user's id, bad input) is a tool
error with the API's message: the caller's model reads it and can try again.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

from asgiref.sync import sync_to_async
from django.http import Http404
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ContentBlock, ImageContent, TextContent
from pydantic import BaseModel, ValidationError

from webapp.actions import output, services
from webapp.actions.api import ActionIn, CredentialsIn, action_request, idempotency_key_checked
from webapp.actions.limits import LimitExceeded
from webapp.actions.selectors import get_action_for_user
from webapp.actions.workspaces_api import (
    workspace_files_for_owner,
    workspace_new_for_owner,
    workspace_read_for_owner,
    workspace_write_for_owner,
)
from webapp.admission.gate import spend_rate
from webapp.admission.ratelimit import QuotaExceeded
from webapp.agents.exec_api import exec_for_token
from webapp.agents.exec_services import in_pool, result_json
from webapp.agents.models import ApiToken
from webapp.agents.schemas import ApiError, ExecIn, SessionExecIn, body_validation_message
from webapp.agents.session_services import HeldByPeer
from webapp.agents.sessions_api import (
    session_exec_for_token,
    session_files_for_token,
    session_new_for_token,
)

# Where webapp.mcp_server.asgi puts the checked ApiToken in the request's ASGI scope.
SCOPE_TOKEN = "undoable.api_token"  # noqa: S105 (a key name, not a secret)
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

server: MCPServer[Any] = MCPServer(
    name="undoable",
    instructions=(
        "Run Python or bash in a sandbox (exec, sessions), and run actions that can be taken "
        "back: action_run proposes a change (fs: a workspace folder, db: a database in a "
        "transaction), action_keep applies it, action_discard throws it away, action_undo "
        "takes an action back."
    ),
)


def _token(ctx: Context[Any, Any]) -> ApiToken:
    request = ctx.request_context.request
    token = None if request is None else request.scope.get(SCOPE_TOKEN)
    if not isinstance(token, ApiToken):
        # The endpoint answers 401 before any tool runs; this holds if a tool is ever reached
        # another way.
        raise ToolError("missing, invalid or revoked API token")
    return token


@asynccontextmanager
async def _refusals() -> AsyncIterator[None]:
    """A request refused as the API refuses it -> a tool error with the API's message."""
    try:
        yield
    except ApiError as exc:
        raise ToolError(f"{exc.message} ({exc.status})") from None
    except QuotaExceeded as exc:
        raise ToolError(f"{exc} (429; retry after {exc.retry_after_s} s)") from None
    except services.ActionRefused as exc:
        raise ToolError(f"{exc.message} ({exc.status})") from None
    except LimitExceeded as exc:
        raise ToolError(f"{exc} ({exc.status})") from None
    except Http404:
        raise ToolError("not found (404)") from None
    except HeldByPeer:
        raise ToolError("this session is held by another web process of the server") from None


def _parsed(model: type[M], arguments: dict[str, Any]) -> M:
    """The tool's arguments through the API's own body model, as strictly as a JSON body."""
    try:
        return model.model_validate_json(json.dumps(arguments))
    except ValidationError as exc:
        raise ToolError(f"{body_validation_message(exc)} (400)") from None


def _answer(data: dict[str, Any]) -> CallToolResult:
    """`data` as JSON text and structured content; its images as image content."""
    images = data.pop("images", [])
    content: list[ContentBlock] = [TextContent(type="text", text=json.dumps(data, indent=1))]
    content += [ImageContent(type="image", data=i["data"], mime_type=i["mime"]) for i in images]
    return CallToolResult(content=content, structured_content=data)


async def _run(work: Awaitable[T]) -> T:
    async with _refusals():
        return await work


@server.tool(description="Run a snippet once in a fresh sandbox (POST /api/v1/exec).")
async def exec(  # noqa: A001 (the tool's name in DESIGN.md)
    code: str,
    ctx: Context[Any, Any],
    language: Literal["python", "bash"] = "python",
    files: dict[str, str] | None = None,
    stdin: str = "",
    interpreter_mode: bool = False,
    timeout_s: float | None = None,
) -> CallToolResult:
    token = _token(ctx)
    given: dict[str, Any] = {"code": code, "language": language, "files": files or {}}
    given |= {"stdin": stdin, "interpreter_mode": interpreter_mode}
    payload = _parsed(ExecIn, given | ({} if timeout_s is None else {"timeout_s": timeout_s}))
    result, _ = await _run(exec_for_token(token, payload))
    return _answer(result_json(result))


@server.tool(description="Start a stateful session: variables and files persist between cells.")
async def session_new(ctx: Context[Any, Any]) -> CallToolResult:
    row = await _run(session_new_for_token(_token(ctx)))
    return _answer({"id": row.pk, "expires_at": row.expires_at.isoformat()})


@server.tool(description="Run a Python cell or bash command in a session (session_new's id).")
async def session_exec(
    session_id: str,
    code: str,
    ctx: Context[Any, Any],
    language: Literal["python", "bash"] = "python",
    timeout_s: float | None = None,
) -> CallToolResult:
    token = _token(ctx)
    payload = _parsed(
        SessionExecIn,
        {"code": code, "language": language}
        | ({} if timeout_s is None else {"timeout_s": timeout_s}),
    )
    result = await _run(session_exec_for_token(token, session_id, payload))
    return _answer(result_json(result))


@server.tool(description="List a folder of a session's files ('' for its working directory).")
async def session_files(session_id: str, ctx: Context[Any, Any], path: str = "") -> CallToolResult:
    entries = await _run(session_files_for_token(_token(ctx), session_id, path))
    return _answer({"path": path, "entries": entries})


@server.tool(
    description=(
        "Create an action and run its forward program (POST /api/v1/actions). kind fs works on "
        "a private copy of a workspace and db in a held transaction: their change is pending "
        "until action_keep or action_discard. reverse_code is what action_undo runs. Give an "
        "idempotency_key (any new string per action) and a retry of the same call answers "
        "with the action it made instead of running it again."
    )
)
async def action_run(
    kind: Literal["python", "fs", "db", "rest"],
    forward_code: str,
    ctx: Context[Any, Any],
    reverse_code: str = "",
    intent: str = "",
    hosts: list[str] | None = None,
    credentials: dict[str, str] | None = None,
    workspace: int | None = None,
    db: dict[str, str] | None = None,
    timeout_s: float | None = None,
    idempotency_key: str = "",
) -> CallToolResult:
    token = _token(ctx)
    async with _refusals():
        key = idempotency_key_checked(idempotency_key)
    given = {
        "kind": kind,
        "forward_code": forward_code,
        "reverse_code": reverse_code,
        "intent": intent,
        "hosts": hosts or [],
        "credentials": credentials or {},
        "workspace": workspace,
        "db": db,
        "timeout_s": timeout_s,
    }
    payload = _parsed(ActionIn, {k: v for k, v in given.items() if v is not None})

    async def run() -> dict[str, Any]:
        request = action_request(payload)
        await in_pool(spend_rate, token.pk)
        create = output.with_own_connection(services.action_create)
        query, _ = await in_pool(create, token=token, request=request, idempotency_key=key)
        return await output.action_settled(query.pk)

    return _answer(await _run(run()))


async def _decided(ctx: Context[Any, Any], action_id: int, decide: Any) -> CallToolResult:
    owner = _token(ctx).owner

    async def run() -> dict[str, Any]:
        query = await sync_to_async(get_action_for_user)(owner, action_id)
        await in_pool(output.with_own_connection(decide), query=query)
        return await output.action_decided(query.pk)

    return _answer(await _run(run()))


@server.tool(description="Keep: apply an action's pending change.")
async def action_keep(action_id: int, ctx: Context[Any, Any]) -> CallToolResult:
    return await _decided(ctx, action_id, services.action_keep)


@server.tool(description="Discard: throw an action's pending change away.")
async def action_discard(action_id: int, ctx: Context[Any, Any]) -> CallToolResult:
    return await _decided(ctx, action_id, services.action_discard)


@server.tool(
    description=(
        "Undo: take an action back by what fits its state: discard a pending change, else run "
        "its reverse program (credentials it needs are given again here, never stored)."
    )
)
async def action_undo(
    action_id: int, ctx: Context[Any, Any], credentials: dict[str, str] | None = None
) -> CallToolResult:
    owner = _token(ctx).owner
    given = _parsed(CredentialsIn, {"credentials": credentials or {}})

    async def run() -> dict[str, Any]:
        query = await sync_to_async(get_action_for_user)(owner, action_id)
        undo = output.with_own_connection(services.action_undo)
        reverse = await in_pool(undo, query=query, credentials=dict(given.credentials))
        if reverse is None:  # a pending change was discarded: nothing ran
            return await output.action_decided(query.pk)
        return await output.action_settled(query.pk)

    return _answer(await _run(run()))


@server.tool(description="An action's state: status, change, output (GET /api/v1/actions/{id}).")
async def action_status(action_id: int, ctx: Context[Any, Any]) -> CallToolResult:
    owner = _token(ctx).owner

    async def run() -> dict[str, Any]:
        query = await sync_to_async(get_action_for_user)(owner, action_id)
        return await sync_to_async(output.action_json)(query)

    return _answer(await _run(run()))


@server.tool(description="A new workspace (a folder for fs and db actions): {id}.")
async def workspace_new(ctx: Context[Any, Any]) -> CallToolResult:
    return _answer({"id": await _run(workspace_new_for_owner(_token(ctx).owner))})


@server.tool(description="Every file of a workspace: path, size, mode, is_link.")
async def workspace_files(workspace_id: int, ctx: Context[Any, Any]) -> CallToolResult:
    return _answer(await _run(workspace_files_for_owner(_token(ctx).owner, workspace_id)))


@server.tool(description="A file of a workspace: its text, or base64 when it is not UTF-8 text.")
async def workspace_read(workspace_id: int, path: str, ctx: Context[Any, Any]) -> CallToolResult:
    data = await _run(workspace_read_for_owner(_token(ctx).owner, workspace_id, path))
    try:
        body = {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        body = {"base64_data": base64.b64encode(data).decode("ascii")}
    return _answer({"path": path, "size": len(data), **body})


@server.tool(description="Write a file of a workspace from text, or from base64 for bytes.")
async def workspace_write(
    workspace_id: int,
    path: str,
    ctx: Context[Any, Any],
    text: str | None = None,
    base64_data: str | None = None,
) -> CallToolResult:
    owner = _token(ctx).owner
    if (text is None) == (base64_data is None):
        raise ToolError("give one of text or base64_data (400)")
    try:
        data = (
            text.encode("utf-8")
            if text is not None
            else base64.b64decode(base64_data or "", validate=True)
        )
    except binascii.Error:
        raise ToolError("base64_data is not base64 (400)") from None
    return _answer(await _run(workspace_write_for_owner(owner, workspace_id, path, data)))
