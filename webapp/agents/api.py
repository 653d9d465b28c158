"""The agent API (django-ninja), mounted at /api/: stateless exec, sessions, offline docs.

Every error is JSON {"error": "..."} with the right status; ninja's own 422/401 shapes are
rewritten here so clients see one shape.
"""

from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Swagger
from ninja.errors import AuthenticationError, HttpError, ValidationError

from webapp.admission.ratelimit import QuotaExceeded
from webapp.agents.api_errors import (
    BODY_TOO_LARGE,
    INTERNAL_ERROR,
    NOT_FOUND,
    UNAUTHENTICATED,
    error_response,
    refusal_response,
)
from webapp.agents.auth import TokenAuth
from webapp.agents.exec_api import router as exec_router
from webapp.agents.schemas import ApiError, JsonBodyParser, validation_message
from webapp.agents.sessions_api import router as sessions_router

logger = logging.getLogger(__name__)


api = NinjaAPI(
    title="Undoable API",
    version="1",
    description="Run code in a sandbox: stateless `POST /api/v1/exec` (replit-code-exec "
    "protocol), stateful sessions, and actions an agent can keep or undo. Authenticate with "
    "`Authorization: Bearer <token>`.",
    urls_namespace="api",
    auth=TokenAuth(),
    # Swagger UI from the files ninja ships ("ninja" is an installed app): no CDN.
    docs=Swagger(),
    parser=JsonBodyParser(),
)
api.add_router("/v1", exec_router)
api.add_router("/v1/sessions", sessions_router)


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return refusal_response(exc)


@api.exception_handler(QuotaExceeded)
def _quota(request: HttpRequest, exc: QuotaExceeded) -> HttpResponse:
    return refusal_response(exc)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(401, UNAUTHENTICATED)


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    return error_response(400, validation_message(exc.errors))


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return error_response(413, BODY_TOO_LARGE)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(404, NOT_FOUND)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, ApiError):  # JsonBodyParser's refusal, wrapped by ninja
        return _api_error(request, exc.__cause__)
    return error_response(exc.status_code, str(exc))


@api.exception_handler(Exception)
def _unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("agent api error", extra={"path": request.path})
    return error_response(500, INTERNAL_ERROR)
