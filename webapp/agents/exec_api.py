"""POST /api/v1/exec: the stateless, replit-code-exec compatible endpoint."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router, Schema

from executor import RunResult
from webapp.agents import conf
from webapp.agents.exec_services import exec_build_spec, exec_run, in_pool, result_json
from webapp.agents.ratelimit import get_limiter
from webapp.agents.schemas import ExecIn, parse_model

router = Router(tags=["exec"])


class ExecOut(Schema):
    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    oom_killed: bool
    truncated: bool
    duration_ms: int


class ErrorOut(Schema):
    error: str


ERRORS = {status: ErrorOut for status in (400, 401, 404, 409, 413, 429, 503)}


def wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def take_quota(request: HttpRequest) -> object:
    """Spend one request of the caller's rate (429 + Retry-After when empty); returns its key."""
    key = request.auth.pk  # type: ignore[attr-defined]
    get_limiter().take(
        key, per_minute=conf.get("AGENTS_RATE_PER_MINUTE"), burst=conf.get_int("AGENTS_RATE_BURST")
    )
    return key


def render_result(request: HttpRequest, result: RunResult, combined: str) -> HttpResponse:
    response: HttpResponse
    if wants_json(request):
        response = JsonResponse(result_json(result))
    else:
        # What the replit-code-exec client returns to its caller: everything printed, in order.
        response = HttpResponse(combined, content_type="text/plain; charset=utf-8")
    response["X-Exit-Code"] = "" if result.exit_code is None else str(result.exit_code)
    response["X-Timed-Out"] = "1" if result.timed_out else "0"
    response["X-Duration-Ms"] = str(result.duration_ms)
    return response


@router.post(
    "/exec",
    response={200: ExecOut, **ERRORS},
    summary="Run a snippet in a fresh sandbox",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ExecIn.model_json_schema()}},
        }
    },
)
async def exec_code(request: HttpRequest) -> HttpResponse:
    """Runs `code` once in a new sandbox. Replies `text/plain` (stdout+stderr as printed) unless
    the request sends `Accept: application/json`."""
    payload = parse_model(ExecIn, request.body)
    spec, timeout_s = exec_build_spec(payload)
    key = take_quota(request)
    with get_limiter().slot(key, limit=conf.get_int("AGENTS_MAX_CONCURRENT_PER_TOKEN")):
        result, combined = await in_pool(exec_run, spec, timeout_s=timeout_s)
    return render_result(request, result, combined)
