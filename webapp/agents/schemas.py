"""Request bodies of the agent API, parsed strictly: wrong types are 400s, never coerced.

The views take these models as ninja body parameters; JsonBodyParser decodes the body first.
"""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja.parser import Parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webapp.agents import conf
from webapp.json_body import BadJsonBody, json_body_read


class ApiError(Exception):
    """An error response: {"error": message} with `status` (and Retry-After when set)."""

    def __init__(self, status: int, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s


class ExecIn(BaseModel):
    """POST /api/v1/exec. Same fields as the replit-code-exec client sends, plus a few."""

    model_config = ConfigDict(strict=True, extra="ignore")

    code: str
    files: dict[str, str] = Field(default_factory=dict)
    interpreter_mode: bool = False
    stdin: str = ""
    timeout_s: float | int | None = None
    language: Literal["python", "bash"] = "python"
    strace: bool = False  # accepted for compatibility; we never run strace


class SessionExecIn(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    code: str
    language: Literal["python", "bash"] = "python"
    timeout_s: float | int | None = None


def validation_message(errors: list[dict[str, Any]]) -> str:
    """The 400 text for ninja's validation errors: the first one, located in the request."""
    err = errors[0] if errors else {"loc": (), "type": "", "msg": "invalid request"}
    loc = tuple(str(part) for part in err.get("loc", ()))
    # ("body", "payload", "code") -> "code": a body model is the request body itself.
    return error_message({**err, "loc": loc[2:] if loc[:1] == ("body",) else loc[1:]})


def body_validation_message(exc: ValidationError) -> str:
    """The 400 text for a body model's own validation error: its first, located in the body."""
    errors = exc.errors(include_url=False, include_input=False)
    return error_message(errors[0]) if errors else "body: invalid request"


def error_message(err: Any) -> str:
    where = ".".join(str(part) for part in err.get("loc", ())) or "body"
    if err.get("type") == "missing":
        return f"{where} is required"
    if err.get("type") == "literal_error":
        return f"{where}: {err['msg']}"
    return f"{where}: {str(err.get('msg', 'invalid request')).lower()}"


class JsonBodyParser(Parser):
    """ninja's body parser with the guards every JSON body gets (webapp.json_body): a size cap
    (413), hostile JSON (400), an object.

    ninja answers any parser exception with its own 400; the API's HttpError handler answers
    with the ApiError underneath instead (its status and text)."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        try:
            return json_body_read(request, max_bytes=conf.get_int("AGENTS_MAX_BODY_BYTES"))
        except BadJsonBody as exc:
            raise ApiError(exc.status, str(exc)) from None


def check_timeout(timeout_s: float | None, cap_s: float) -> float:
    """The wall time for a run: the request's (0 < t <= cap) or the default, never above the cap."""
    if timeout_s is None:
        return min(conf.get("AGENTS_DEFAULT_TIMEOUT_S"), cap_s)
    if not (0 < timeout_s <= cap_s):
        raise ApiError(400, f"timeout_s must be > 0 and <= {cap_s:g}")
    return float(timeout_s)
