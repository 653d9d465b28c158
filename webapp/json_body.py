"""Read a JSON request body. The agent API's parser (webapp.agents.schemas.JsonBodyParser) and the
pages' JSON calls (query save, run) read theirs through json_body_read, then validate it with a
pydantic model; every way a body can fail is one BadJsonBody: 413 too large, otherwise 400.

`json.loads` raises more than JSONDecodeError on hostile input: a ValueError for an integer past
the interpreter's digit limit (sys.get_int_max_str_digits) and a RecursionError for nesting
deeper than the recursion limit. Both used to escape the views as 500s.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from pydantic import BaseModel, ValidationError

Body = TypeVar("Body", bound=BaseModel)


class BadJsonBody(ValueError):
    """The body is not JSON we can read; str() is a message for the client, `status` the
    answer's status (413 for a body past the cap, 400 for anything else)."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def json_body_loads(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadJsonBody("request body is not valid UTF-8") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadJsonBody(f"request body is not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise BadJsonBody("request body is nested too deeply") from None
    except ValueError:
        # Only int() of a too-long digit string raises a plain ValueError inside json.loads.
        limit = sys.get_int_max_str_digits()
        raise BadJsonBody(f"request body has a number longer than {limit} digits") from None


def json_body_read(request: HttpRequest, *, max_bytes: int | None = None) -> dict[str, Any]:
    """The request's body as a JSON object (an empty body is an empty object), or BadJsonBody.

    Too large is past `max_bytes` (default: Django's DATA_UPLOAD_MAX_MEMORY_SIZE, the cap it
    keeps for every body it reads), or past DATA_UPLOAD_MAX_MEMORY_SIZE, which Django refuses
    to read at all."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE if max_bytes is None else max_bytes
    try:
        body = request.body
    except RequestDataTooBig:
        raise BadJsonBody("request body is too large", status=413) from None
    if limit is not None and len(body) > limit:
        raise BadJsonBody("request body is too large", status=413)
    data = json_body_loads(body) if body else {}
    if not isinstance(data, dict):
        raise BadJsonBody("request body must be a JSON object")
    return data


def json_body_model(request: HttpRequest, model: type[Body]) -> Body:
    """The request's body read by json_body_read and validated by `model`; BadJsonBody (400) for
    the first validation error."""
    try:
        return model.model_validate(json_body_read(request))
    except ValidationError as exc:
        raise BadJsonBody(exc.errors(include_input=False, include_url=False)[0]["msg"]) from None


def bad_json_body_response(exc: BadJsonBody) -> JsonResponse:
    """The pages' answer to a body they cannot use: {"error": "Invalid request: ..."}."""
    return JsonResponse({"error": f"Invalid request: {exc}"}, status=exc.status)
