"""POST /api/v1/exec: the stateless, replit-code-exec compatible endpoint.

One ninja operation (exec_operation: the OpenAPI schema's, and what Django's handler serves) and
the same endpoint as a plain async view (exec_view), which the server runs straight from ASGI
without Django's handler or ninja (webapp.server.direct_view), because that costs measurably
less (docs/architecture.md, "Why exec skips ninja"). Both answer through exec_for_token and
render_result with the API's token check, body parser and error shape.
"""

from __future__ import annotations

import functools
from typing import Literal

from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router, Schema
from pydantic import ValidationError

from webapp.admission.gate import within_quota
from webapp.admission.ratelimit import QuotaExceeded
from webapp.agents.api_errors import (
    UNAUTHENTICATED,
    error_response,
    method_not_allowed,
    refusal_response,
)
from webapp.agents.auth import authenticated
from webapp.agents.exec_services import exec_build_spec, exec_run, result_json
from webapp.agents.models import ApiToken
from webapp.agents.schemas import ApiError, ExecIn, JsonBodyParser, body_validation_message
from webapp.audit.tally import audit_count
from webapp.executor_glue import RunResult


class ExecOut(Schema):
    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None
    limit: Literal["wall_time", "cpu_time", "memory", "output", "pids", "file_size"] | None
    timed_out: bool
    oom_killed: bool
    truncated: bool
    duration_ms: int


class ErrorOut(Schema):
    error: str


ERRORS = {status: ErrorOut for status in (400, 401, 404, 409, 413, 429, 503)}
EXEC_ERRORS = (400, 401, 405, 413, 429, 500, 503)

router = Router(tags=["exec"])


def wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def quota_key(request: HttpRequest) -> object:
    return token_quota_key(request.auth)  # type: ignore[attr-defined]


def token_quota_key(token: ApiToken) -> object:
    """Whose rate and concurrency quota a request spends: its token's."""
    return token.pk


def tenant_key(token: ApiToken) -> object:
    """Whom the host's fair share counts: the token's owner, so many tokens are one tenant."""
    return token.owner_id


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
    response={200: ExecOut, **{status: ErrorOut for status in EXEC_ERRORS}},
    operation_id="exec",
    summary="Run a snippet in a fresh sandbox",
    description="Runs `code` once in a new sandbox. Replies `text/plain` (stdout+stderr as "
    "printed) unless the request sends `Accept: application/json`.",
)
async def exec_operation(request: HttpRequest, payload: ExecIn) -> HttpResponse:
    """POST /api/v1/exec as a ninja operation: its token, body and refusals are ninja's."""
    result, combined = await exec_for_token(request.auth, payload)  # type: ignore[attr-defined]
    return render_result(request, result, combined)


async def exec_view(request: HttpRequest) -> HttpResponse:
    """POST /api/v1/exec as the server runs it, without ninja (webapp.server.direct_view).

    Everything it answers is the API's as exec_operation gives it: the bearer token
    (TokenAuth), the body parsed by the API's parser and validated by ExecIn, the API's error
    shape.
    """
    if request.method != "POST":
        return method_not_allowed(request.method or "", allowed="POST")
    # Where ninja puts the token, for quota_key.
    request.auth = await authenticated(request)  # type: ignore[attr-defined]
    if request.auth is None:  # type: ignore[attr-defined]
        return error_response(401, UNAUTHENTICATED)
    try:
        result, combined = await exec_for_token(request.auth, exec_payload(request))  # type: ignore[attr-defined]
    except (ApiError, QuotaExceeded) as refused:
        return refusal_response(refused)
    return render_result(request, result, combined)


async def exec_for_token(token: ApiToken, payload: ExecIn) -> tuple[RunResult, str]:
    """Run `payload` in a fresh sandbox within `token`'s quota (ApiError or QuotaExceeded when
    refused): POST /api/v1/exec and the MCP tool exec."""
    spec, timeout_s = exec_build_spec(payload)
    run = functools.partial(exec_run, spec, timeout_s=timeout_s)
    result, combined = await within_quota(token_quota_key(token), tenant_key(token), run)
    audit_count(token=token, event="exec_summary", result=result)
    return result, combined


def exec_payload(request: HttpRequest) -> ExecIn:
    """The request's body as ExecIn, or ApiError: as ninja reads a body parameter."""
    try:
        return ExecIn.model_validate(JsonBodyParser().parse_body(request))
    except ValidationError as exc:
        raise ApiError(400, body_validation_message(exc)) from None
