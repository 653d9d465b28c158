"""/api/v1/workspaces: workspaces as objects of their own, which actions (and queries) work in.

Thin: the owner's workspace (404 for anyone else's) -> webapp.workspaces' services -> the
answer. Files are written, read and deleted by the host through no-follow paths
(webapp.workspaces.files), never by anything running in a sandbox.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router, Schema

from webapp.actions.output import with_own_connection
from webapp.agents.exec_api import ERRORS
from webapp.agents.exec_services import in_pool
from webapp.agents.schemas import ApiError
from webapp.agents.sessions_api import _names_in_utf8 as names_in_utf8
from webapp.executor_glue import InvalidSpec, WorkspaceBusy
from webapp.workspaces import files, uploads
from webapp.workspaces import services as workspaces
from webapp.workspaces.models import Workspace
from webapp.workspaces.selectors import MAX_LISTED, get_workspace_for_user, workspace_listing

router = Router(tags=["workspaces"])


class WorkspaceOut(Schema):
    id: int


class EntryOut(Schema):
    path: str
    size: int
    mode: str
    is_link: bool


class ListingOut(Schema):
    entries: list[EntryOut]
    truncated: bool


class WrittenOut(Schema):
    path: str
    size: int


async def _load(request: HttpRequest, workspace_id: int) -> Workspace:
    owner = request.auth.owner  # type: ignore[attr-defined]
    return await sync_to_async(get_workspace_for_user)(owner, workspace_id)


# What the views and the MCP tools (webapp.mcp_server.tools) both do, for the token's owner.


async def workspace_new_for_owner(owner: User) -> int:
    workspace = await in_pool(with_own_connection(workspaces.workspace_create), owner=owner)
    return int(workspace.pk)


async def workspace_files_for_owner(owner: User, workspace_id: int) -> dict[str, Any]:
    workspace = await sync_to_async(get_workspace_for_user)(owner, workspace_id)
    entries = await in_pool(workspace_listing, workspace)
    return {"entries": entries, "truncated": len(entries) >= MAX_LISTED}


async def workspace_read_for_owner(owner: User, workspace_id: int, path: str) -> bytes:
    workspace = await sync_to_async(get_workspace_for_user)(owner, workspace_id)
    try:
        data: bytes = await in_pool(files.workspace_file_read, workspace=workspace, path=path)
    except (InvalidSpec, WorkspaceBusy) as exc:
        raise _refusal(exc) from None
    return data


async def workspace_write_for_owner(
    owner: User, workspace_id: int, path: str, data: bytes
) -> dict[str, Any]:
    if len(data) > uploads.MAX_UPLOAD_BYTES:
        raise ApiError(413, f"files may be at most {uploads.MAX_UPLOAD_BYTES} bytes")
    workspace = await sync_to_async(get_workspace_for_user)(owner, workspace_id)
    try:
        written = await in_pool(
            files.workspace_file_write, workspace=workspace, path=path, data=data
        )
    except (InvalidSpec, WorkspaceBusy) as exc:
        raise _refusal(exc) from None
    return {"path": written, "size": len(data)}


def _refusal(exc: Exception) -> ApiError:
    if isinstance(exc, files.FileMissing):
        return ApiError(404, str(exc))
    if isinstance(exc, WorkspaceBusy):
        return ApiError(409, str(exc))
    return ApiError(400, str(exc))


def _body(request: HttpRequest) -> bytes:
    """The raw body, at most the upload cap (413 beyond), read from the stream: Django's
    request.body stops at DATA_UPLOAD_MAX_MEMORY_SIZE."""
    limit = uploads.MAX_UPLOAD_BYTES
    declared = request.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"files may be at most {limit} bytes")
    data = request.read(limit + 1)
    if len(data) > limit:
        raise ApiError(413, f"files may be at most {limit} bytes")
    return data


@router.post("", response={201: WorkspaceOut, **ERRORS}, summary="Create a workspace")
async def create_workspace(request: HttpRequest) -> HttpResponse:
    owner = request.auth.owner  # type: ignore[attr-defined]
    return JsonResponse({"id": await workspace_new_for_owner(owner)}, status=201)


@router.get("/{workspace_id}/files", response={200: ListingOut, **ERRORS}, summary="List files")
async def list_files(request: HttpRequest, workspace_id: int) -> HttpResponse:
    """Every file, folder link and link (never followed), dot-files included, up to a cap."""
    owner = request.auth.owner  # type: ignore[attr-defined]
    return JsonResponse(await workspace_files_for_owner(owner, workspace_id))


@router.put(
    "/{workspace_id}/files/{path:path}",
    response={200: WrittenOut, **ERRORS},
    summary="Upload a file (raw request body)",
)
async def put_file(request: HttpRequest, workspace_id: int, path: str) -> HttpResponse:
    names_in_utf8(request)
    owner = request.auth.owner  # type: ignore[attr-defined]
    await sync_to_async(get_workspace_for_user)(owner, workspace_id)  # 404 before the body
    written = await workspace_write_for_owner(owner, workspace_id, path, _body(request))
    return JsonResponse(written)


@router.get(
    "/{workspace_id}/files/{path:path}",
    response={200: bytes, **ERRORS},
    summary="Download a file (raw bytes)",
)
async def get_file(request: HttpRequest, workspace_id: int, path: str) -> HttpResponse:
    names_in_utf8(request)
    owner = request.auth.owner  # type: ignore[attr-defined]
    data = await workspace_read_for_owner(owner, workspace_id, path)
    return HttpResponse(data, content_type="application/octet-stream")


@router.delete(
    "/{workspace_id}/files/{path:path}",
    response={204: None, **ERRORS},
    summary="Delete a file, a link or a folder",
)
async def delete_file(request: HttpRequest, workspace_id: int, path: str) -> HttpResponse:
    names_in_utf8(request)
    workspace = await _load(request, workspace_id)
    try:
        await in_pool(files.workspace_file_delete, workspace=workspace, path=path)
    except (InvalidSpec, WorkspaceBusy) as exc:
        raise _refusal(exc) from None
    return HttpResponse(status=204)


@router.post(
    "/{workspace_id}/zip",
    response={200: ListingOut, **ERRORS},
    summary="Upload a zip (raw body), unpacked into the workspace, all or nothing",
)
async def upload_zip(request: HttpRequest, workspace_id: int) -> HttpResponse:
    workspace = await _load(request, workspace_id)
    upload = SimpleUploadedFile("upload.zip", _body(request))
    try:
        await in_pool(workspaces.workspace_upload, workspace=workspace, files=[upload])
    except (InvalidSpec, WorkspaceBusy) as exc:
        raise _refusal(exc) from None
    entries = await in_pool(workspace_listing, workspace)
    return JsonResponse({"entries": entries, "truncated": len(entries) >= MAX_LISTED})


@router.get("/{workspace_id}/tar", response={200: bytes, **ERRORS}, summary="Download as a tar")
async def download_tar(request: HttpRequest, workspace_id: int) -> HttpResponse:
    """A gzipped tar of the workspace: modes kept, links stored as links."""
    workspace = await _load(request, workspace_id)
    data = await in_pool(workspaces.workspace_tar, workspace=workspace)
    return HttpResponse(data, content_type="application/gzip")


@router.get("/{workspace_id}/zip", response={200: bytes, **ERRORS}, summary="Download as a zip")
async def download_zip(request: HttpRequest, workspace_id: int) -> HttpResponse:
    workspace = await _load(request, workspace_id)
    data = await in_pool(workspaces.workspace_zip, workspace=workspace)
    response = HttpResponse(data, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="workspace-{workspace.pk}.zip"'
    return response
