"""/api/v1/actions: create-and-run, Keep, Discard, Undo, status, list (shared/DESIGN.md).

Thin: the body model -> webapp.actions.services -> the action's JSON (webapp.actions.output).
The forward run's output streams as NDJSON with `Accept: application/x-ndjson`, else one JSON
answers at the end.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from ninja import Router, Schema
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from webapp.actions import output, services
from webapp.actions.classes import CLASSES
from webapp.actions.limits import LimitExceeded, token_limits
from webapp.actions.requests import ActionRequest
from webapp.actions.selectors import action_list_for_user, get_action_for_user
from webapp.actions.state import STATUSES
from webapp.admission.gate import spend_rate
from webapp.agents import conf
from webapp.agents.exec_api import ERRORS, quota_key
from webapp.agents.exec_services import in_pool
from webapp.agents.schemas import ApiError

router = Router(tags=["actions"])

NDJSON = "application/x-ndjson"
MAX_HOSTS = 50
MAX_CREDENTIALS = 20
MAX_INTENT_CHARS = 2000
MAX_KEY_CHARS = 200
# An environment variable's name: the program reads the credential as os.environ[NAME].
CREDENTIAL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
HOST_NAME = re.compile(r"[A-Za-z0-9.*:\[\]-]{1,253}")


def check_credential_names(names: Iterable[str]) -> None:
    """ValueError unless each of `names` is an environment variable's name."""
    for name in names:
        if not CREDENTIAL_NAME.fullmatch(name):
            raise ValueError("credential names are environment variable names (A-Z, 0-9, _)")


def check_host_names(hosts: Iterable[str]) -> None:
    """ValueError unless each of `hosts` is a host name (with a port, or a `*` pattern)."""
    for host in hosts:
        if not HOST_NAME.fullmatch(host):
            raise ValueError("hosts are host names (letters, digits, '.', '-', '*', port)")


class DbTarget(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    sqlite: str | None = None
    # A credential holding a database URL: its scheme picks the engine (postgresql://,
    # mysql://, mariadb://). "postgres" is its name from before MariaDB, still accepted.
    url: str | None = None
    postgres: str | None = None

    @model_validator(mode="after")
    def _one_target(self) -> DbTarget:
        if [self.sqlite, self.url, self.postgres].count(None) != 2:
            raise ValueError('give one of {"sqlite": PATH} or {"url": CREDENTIAL_NAME}')
        return self

    @property
    def credential(self) -> str | None:
        return self.url if self.url is not None else self.postgres


class ActionIn(BaseModel):
    """POST /api/v1/actions. Credential values are for this call only: never stored."""

    model_config = ConfigDict(strict=True, extra="forbid")

    kind: Literal["python", "fs", "db", "rest"]
    forward_code: str
    reverse_code: str = ""
    hosts: list[str] = Field(default_factory=list, max_length=MAX_HOSTS)
    intent: str = Field(default="", max_length=MAX_INTENT_CHARS)
    credentials: dict[str, str] = Field(default_factory=dict, max_length=MAX_CREDENTIALS)
    workspace: int | None = None
    db: DbTarget | None = None
    timeout_s: float | int | None = None
    # true: rehearse on a throwaway copy first, run for real only if the reverse program
    # restores the state; "only": rehearse and stop (fs and db actions).
    rehearse: bool | Literal["only"] = False
    # rest only: a program that exits 0 once the effect is gone, run after the reverse program
    # (an extension of shared/DESIGN.md's request; docs/api.md).
    probe: str = ""

    @field_validator("credentials")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        check_credential_names(value)
        return value

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        check_host_names(value)
        return value


class CredentialsIn(BaseModel):
    """Undo's body: the credentials the reverse program needs, given again (never stored)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    credentials: dict[str, str] = Field(default_factory=dict, max_length=MAX_CREDENTIALS)


class ActionOut(Schema):
    id: int
    status: Literal[STATUSES]  # type: ignore[valid-type]
    kind: str
    intent: str
    workspace: int | None
    change: dict | list | None  # type: ignore[type-arg]
    stdout: str
    stderr: str
    exit_code: int | None
    error: str
    reverse: dict | None  # type: ignore[type-arg]
    # {restored, message, diff, counters, before, after, seconds, code, stale[, stopped]}
    rehearsal: dict | None  # type: ignore[type-arg]
    class_: Literal[CLASSES] = Field(alias="class")  # type: ignore[valid-type]


class ActionListOut(Schema):
    actions: list[ActionOut]


def action_request(payload: ActionIn) -> ActionRequest:
    cap = conf.get_int("AGENTS_MAX_CODE_BYTES")
    for name in ("forward_code", "reverse_code", "probe"):
        if len(getattr(payload, name).encode("utf-8", "surrogatepass")) > cap:
            raise ApiError(413, f"{name} is larger than {cap} bytes")
    if not payload.forward_code.strip():
        raise ApiError(400, "forward_code is empty")
    if payload.probe.strip() and payload.kind != "rest":
        raise ApiError(400, "probe is for rest actions (fs and db undos are verified by digest)")
    cap_s = float(settings.EXECUTOR_WALL_TIME_S)
    if payload.timeout_s is not None and not 0 < payload.timeout_s <= cap_s:
        raise ApiError(400, f"timeout_s must be > 0 and <= {cap_s:g}")
    return ActionRequest(
        kind=payload.kind,
        forward_code=payload.forward_code,
        reverse_code=payload.reverse_code,
        hosts=list(payload.hosts),
        intent=payload.intent,
        credentials=dict(payload.credentials),
        workspace=payload.workspace,
        sqlite=payload.db.sqlite if payload.db else None,
        postgres=payload.db.credential if payload.db else None,
        wall_time_s=None if payload.timeout_s is None else float(payload.timeout_s),
        rehearse=payload.rehearse,
        probe=payload.probe,
    )


def _refused(exc: services.ActionRefused) -> ApiError:
    return ApiError(exc.status, exc.message)


async def _answer(request: HttpRequest, query_id: int, *, status: int) -> HttpResponseBase:
    """The run's output as it comes (NDJSON, the action last) or the action once it has
    settled (JSON)."""
    if NDJSON in request.headers.get("Accept", ""):
        lines = output.action_stream(query_id)
        return StreamingHttpResponse(lines, status=status, content_type=NDJSON)
    return JsonResponse(await output.action_settled(query_id), status=status)


def idempotency_key_checked(raw: str) -> str:
    """An Idempotency-Key (the header, or MCP's `idempotency_key`): '' for none."""
    key = raw.strip()
    if len(key) > MAX_KEY_CHARS or not key.isprintable():
        raise ApiError(
            400, f"Idempotency-Key must be printable and at most {MAX_KEY_CHARS} characters"
        )
    return key


@router.post(
    "",
    response={200: ActionOut, 201: ActionOut, **ERRORS},
    summary="Create an action and run its forward program",
)
async def create_action(request: HttpRequest, payload: ActionIn) -> HttpResponseBase:
    """Runs the forward program once. With an `Idempotency-Key` header a retry of the same
    request returns the same action (200) and never runs it again; the same key with another
    request is refused (409). The answer is the action once it has settled (or its output as
    NDJSON lines with `Accept: application/x-ndjson`, the action last)."""
    key = idempotency_key_checked(request.headers.get("Idempotency-Key", ""))
    action = action_request(payload)
    await in_pool(spend_rate, quota_key(request))
    try:
        query, created = await in_pool(
            output.with_own_connection(services.action_create),
            token=request.auth,  # type: ignore[attr-defined]
            request=action,
            idempotency_key=key,
        )
    except services.ActionRefused as exc:
        raise _refused(exc) from None
    except LimitExceeded as exc:
        raise ApiError(exc.status, str(exc), retry_after_s=exc.retry_after_s) from None
    return await _answer(request, query.pk, status=201 if created else 200)


@router.get("", response={200: ActionListOut, **ERRORS}, summary="List actions")
async def list_actions(
    request: HttpRequest,
    status: str | None = None,
    kind: str | None = None,
    token: str | None = None,
) -> HttpResponse:
    """Newest first, at most 100; `token` is the prefix of the token that made them."""
    owner = request.auth.owner  # type: ignore[attr-defined]
    if status is not None and status not in STATUSES:
        raise ApiError(400, f"status must be one of: {', '.join(STATUSES)}")
    found = await sync_to_async(action_list_for_user)(owner, status=status, kind=kind, token=token)
    return JsonResponse({"actions": found})


class LimitsOut(Schema):
    allowed_kinds: list[str]
    allowed_hosts: list[str]
    allowed_db_targets: list[str]
    actions_per_hour: int | None
    pending_at_once: int | None
    review_required: bool
    rehearsal_required: bool


@router.get("/limits", response={200: LimitsOut, **ERRORS}, summary="This token's limits")
async def get_limits(request: HttpRequest) -> HttpResponse:
    """The damage limits its owner set on the token making this request (empty: none)."""
    limits = await sync_to_async(token_limits)(request.auth)  # type: ignore[attr-defined]
    return JsonResponse(limits.as_json())


@router.get("/{action_id}", response={200: ActionOut, **ERRORS}, summary="An action's state")
async def get_action(request: HttpRequest, action_id: int) -> HttpResponse:
    owner = request.auth.owner  # type: ignore[attr-defined]
    query = await sync_to_async(get_action_for_user)(owner, action_id)
    return JsonResponse(await sync_to_async(output.action_json)(query))


async def _decide(request: HttpRequest, action_id: int, decide: object) -> HttpResponse:
    owner = request.auth.owner  # type: ignore[attr-defined]
    query = await sync_to_async(get_action_for_user)(owner, action_id)
    try:
        await in_pool(output.with_own_connection(decide), query=query)  # type: ignore[arg-type]
    except services.ActionRefused as exc:
        raise _refused(exc) from None
    except LimitExceeded as exc:
        raise ApiError(exc.status, str(exc)) from None
    return JsonResponse(await output.action_decided(query.pk))


@router.post("/{action_id}/keep", response={200: ActionOut, **ERRORS}, summary="Keep")
async def keep_action(request: HttpRequest, action_id: int) -> HttpResponse:
    """Apply a pending fs or db change; for a rest action, record that its effect stands.
    A token that requires review is refused (403): its owner keeps the action on its page."""
    return await _decide(request, action_id, services.action_keep)


@router.post("/{action_id}/discard", response={200: ActionOut, **ERRORS}, summary="Discard")
async def discard_action(request: HttpRequest, action_id: int) -> HttpResponse:
    """Throw a pending fs or db change away."""
    return await _decide(request, action_id, services.action_discard)


@router.post("/{action_id}/undo", response={200: ActionOut, **ERRORS}, summary="Undo")
async def undo_action(
    request: HttpRequest, action_id: int, payload: CredentialsIn
) -> HttpResponseBase:
    """Take the action back by what fits its state: Discard while its change is pending, else
    run its reverse program (which gets the forward output as FORWARD_OUTPUT), with the
    credentials given again here. Answers like create (JSON at the end, or NDJSON)."""
    owner = request.auth.owner  # type: ignore[attr-defined]
    query = await sync_to_async(get_action_for_user)(owner, action_id)
    try:
        run = await in_pool(
            output.with_own_connection(services.action_undo),
            query=query,
            credentials=dict(payload.credentials),
        )
    except services.ActionRefused as exc:
        raise _refused(exc) from None
    if run is None:  # a pending change was discarded: nothing ran
        return JsonResponse(await output.action_decided(query.pk))
    return await _answer(request, query.pk, status=200)
