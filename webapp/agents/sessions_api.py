"""Stateful sessions: /api/v1/sessions (create, exec, files, delete)."""

from __future__ import annotations

import functools
from urllib.parse import unquote_to_bytes

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router, Schema

from webapp.admission.gate import spend_rate, within_quota
from webapp.agents import conf
from webapp.agents.exec_api import (
    ERRORS,
    ErrorOut,
    ExecOut,
    tenant_key,
    token_quota_key,
)
from webapp.agents.exec_services import in_pool, result_json
from webapp.agents.models import AgentSession, ApiToken
from webapp.agents.schemas import ApiError, SessionExecIn, check_timeout
from webapp.agents.session_forward import served_by_holder
from webapp.agents.session_services import (
    get_session_for_user,
    session_create,
    session_delete,
    session_touch,
)
from webapp.audit.tally import audit_count
from webapp.executor_glue import FileMissing, InvalidSpec, RunResult, Session, SessionBusy

router = Router(tags=["sessions"])

# 410: the web process holding the session is gone, and the session with it.
SESSION_ERRORS = {**ERRORS, 410: ErrorOut}


class SessionOut(Schema):
    id: str
    expires_at: str


class FileOut(Schema):
    name: str
    type: str
    size: int


class FileListOut(Schema):
    path: str
    entries: list[FileOut]


def _session_json(row: AgentSession) -> dict[str, str]:
    return {"id": row.pk, "expires_at": row.expires_at.isoformat()}


async def _load(request: HttpRequest, session_id: str) -> tuple[AgentSession, Session]:
    user = request.auth.owner  # type: ignore[attr-defined]
    return await sync_to_async(get_session_for_user)(user, session_id)


def _names_in_utf8(request: HttpRequest) -> None:
    """Refuse a file name in the URL that is not UTF-8 once unescaped. The server hands the
    views such a name with U+FFFD for each bad byte, so `%FF.txt` and `%FE.txt` would both be
    the file `\ufffd.txt`, and uploading one would replace the other."""
    scope = request.scope  # type: ignore[attr-defined] # served over ASGI only (webapp.server.serve)
    for part in (scope.get("raw_path") or b"", scope.get("query_string") or b""):
        try:
            unquote_to_bytes(part).decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, "file names must be UTF-8 (after %-unescaping)") from None


async def _touch(row: AgentSession, session: Session) -> None:
    await sync_to_async(session_touch)(row, session)


@router.post("", response={201: SessionOut, **ERRORS}, summary="Start a session")
async def create_session(request: HttpRequest) -> HttpResponse:
    row = await session_new_for_token(request.auth)  # type: ignore[attr-defined]
    return JsonResponse(_session_json(row), status=201)


async def session_new_for_token(token: ApiToken) -> AgentSession:
    """A new session of `token`'s, its request rate spent (also the MCP tool session_new)."""
    await in_pool(spend_rate, token.pk)
    return await sync_to_async(session_create)(token=token)


@router.get("/{session_id}", response={200: SessionOut, **SESSION_ERRORS}, summary="Session status")
@served_by_holder
async def get_session(request: HttpRequest, session_id: str) -> HttpResponse:
    row, _ = await _load(request, session_id)
    return JsonResponse(_session_json(row))


@router.delete("/{session_id}", response={204: None, **SESSION_ERRORS}, summary="End a session")
@served_by_holder
async def delete_session(request: HttpRequest, session_id: str) -> HttpResponse:
    row, _ = await _load(request, session_id)
    await sync_to_async(session_delete)(row=row)
    return HttpResponse(status=204)


@router.post(
    "/{session_id}/exec",
    response={200: ExecOut, **SESSION_ERRORS},
    summary="Run a Python cell or bash command in the session",
)
@served_by_holder
async def exec_in_session(
    request: HttpRequest, session_id: str, payload: SessionExecIn
) -> HttpResponse:
    """Python variables, imports and functions persist between calls; the value of a final bare
    expression is printed; a failing cell prints its traceback and keeps earlier state."""
    result = await session_exec_for_token(request.auth, session_id, payload)  # type: ignore[attr-defined]
    return JsonResponse(result_json(result))


async def session_exec_for_token(
    token: ApiToken, session_id: str, payload: SessionExecIn
) -> RunResult:
    """Run one cell in `token`'s owner's session (ApiError when refused; HeldByPeer when
    another web process holds it): the API's view and the MCP tool session_exec."""
    row, session = await sync_to_async(get_session_for_user)(token.owner, session_id)
    if len(payload.code.encode("utf-8", "surrogatepass")) > conf.get_int("AGENTS_MAX_CODE_BYTES"):
        raise ApiError(413, "code is too large")
    timeout_s = check_timeout(payload.timeout_s, session.config.limits.wall_time_s)
    cell = functools.partial(
        session.exec, payload.code, language=payload.language, timeout_s=timeout_s
    )
    try:
        result = await within_quota(token_quota_key(token), tenant_key(token), cell)
    except SessionBusy as exc:
        raise ApiError(409, str(exc)) from None
    audit_count(token=token, event="cell_summary", result=result)
    await _touch(row, session)
    return result


@router.get(
    "/{session_id}/files", response={200: FileListOut, **SESSION_ERRORS}, summary="List files"
)
@served_by_holder
async def list_files(request: HttpRequest, session_id: str, path: str = "") -> HttpResponse:
    _names_in_utf8(request)
    listing = await session_files_for_token(request.auth, session_id, path)  # type: ignore[attr-defined]
    return JsonResponse({"path": path, "entries": listing})


async def session_files_for_token(
    token: ApiToken, session_id: str, path: str
) -> list[dict[str, object]]:
    """{name, type, size} of each entry of folder `path` in `token`'s owner's session: the
    API's view and the MCP tool session_files."""
    row, session = await sync_to_async(get_session_for_user)(token.owner, session_id)
    try:
        entries = await in_pool(session.list_files, path)
    except InvalidSpec as exc:
        raise ApiError(404 if isinstance(exc, FileMissing) else 400, str(exc)) from None
    await _touch(row, session)
    return [{"name": e.name, "type": e.kind, "size": e.size} for e in entries]


@router.put(
    "/{session_id}/files/{path:path}",
    response={200: FileOut, **SESSION_ERRORS},
    summary="Upload a file (raw request body)",
)
@served_by_holder
async def put_file(request: HttpRequest, session_id: str, path: str) -> HttpResponse:
    _names_in_utf8(request)
    row, session = await _load(request, session_id)
    limit = conf.get_int("AGENTS_SESSION_MAX_FILE_BYTES")
    declared = request.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"files may be at most {limit} bytes")
    # Read the stream ourselves: Django's request.body stops at DATA_UPLOAD_MAX_MEMORY_SIZE.
    data = request.read(limit + 1)
    if len(data) > limit:
        raise ApiError(413, f"files may be at most {limit} bytes")
    try:
        await in_pool(session.write_file, path, data)
    except InvalidSpec as exc:
        raise ApiError(400, str(exc)) from None
    await _touch(row, session)
    return JsonResponse({"name": path, "type": "file", "size": len(data)})


@router.get(
    "/{session_id}/files/{path:path}",
    response={200: bytes, **SESSION_ERRORS},
    summary="Download a file (raw bytes)",
)
@served_by_holder
async def get_file(request: HttpRequest, session_id: str, path: str) -> HttpResponse:
    _names_in_utf8(request)
    row, session = await _load(request, session_id)
    try:
        data = await in_pool(session.read_file, path)
    except InvalidSpec as exc:
        raise ApiError(404 if isinstance(exc, FileMissing) else 400, str(exc)) from None
    await _touch(row, session)
    return HttpResponse(data, content_type="application/octet-stream")


@router.delete(
    "/{session_id}/files/{path:path}",
    response={204: None, **SESSION_ERRORS},
    summary="Delete a file or directory",
)
@served_by_holder
async def delete_file(request: HttpRequest, session_id: str, path: str) -> HttpResponse:
    _names_in_utf8(request)
    row, session = await _load(request, session_id)
    try:
        await in_pool(session.delete_file, path)
    except InvalidSpec as exc:
        raise ApiError(404 if isinstance(exc, FileMissing) else 400, str(exc)) from None
    await _touch(row, session)
    return HttpResponse(status=204)
