"""Request bodies of the agent API, parsed strictly: wrong types are 400s, never coerced."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webapp.agents import conf
from webapp.json_body import BadJsonBody, json_body_loads

M = TypeVar("M", bound=BaseModel)


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


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(part) for part in err["loc"]) or "body"
    if err["type"] == "missing":
        return f"{where} is required"
    if err["type"] == "literal_error":
        return f"{where}: {err['msg']}"
    return f"{where}: {err['msg'].lower()}"


def parse_json_body(body: bytes) -> dict[str, Any]:
    """Decode a JSON object body or raise ApiError(400/413)."""
    if len(body) > conf.get_int("AGENTS_MAX_BODY_BYTES"):
        raise ApiError(413, "request body is too large")
    try:
        data = json_body_loads(body)
    except BadJsonBody as exc:
        raise ApiError(400, str(exc)) from None
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object")
    return data


def parse_model(model: type[M], body: bytes) -> M:
    try:
        return model.model_validate(parse_json_body(body))
    except ValidationError as exc:
        raise ApiError(400, _first_error(exc)) from None


def check_timeout(timeout_s: float | None, cap_s: float) -> float:
    """The wall time for a run: the request's (0 < t <= cap) or the default, never above the cap."""
    if timeout_s is None:
        return min(conf.get("AGENTS_DEFAULT_TIMEOUT_S"), cap_s)
    if not (0 < timeout_s <= cap_s):
        raise ApiError(400, f"timeout_s must be > 0 and <= {cap_s:g}")
    return float(timeout_s)
