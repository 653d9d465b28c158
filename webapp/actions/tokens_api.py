"""/api/v1/tokens/{id}/limits: an owner's token reads and sets the damage limits of another of
the owner's tokens (the account page's Limits page and `manage.py token_limits`, through the API).

Setting cannot widen the blast radius of the agent asking: the token asking must not be the
token it sets, and must have no limits of its own (403 naming why); another person's token is
a 404. Validation is webapp.actions.limits', the same as the page's and the command's.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router
from pydantic import BaseModel, ConfigDict

from webapp.actions.api import LimitsOut
from webapp.actions.limits import (
    Limits,
    LimitsInvalid,
    SetterRefused,
    cap_from_number,
    limited_setter_refuse,
    own_limits_refuse,
    owned_token,
    token_limits,
    token_limits_set,
)
from webapp.agents.exec_api import ERRORS, ErrorOut
from webapp.agents.models import ApiToken
from webapp.agents.schemas import ApiError

router = Router(tags=["tokens"])
SET_ERRORS = {**ERRORS, 403: ErrorOut}


class LimitsIn(BaseModel):
    """PUT's body: every limit, replacing the token's (as GET answers them). Empty lists and
    null caps are no limit; a negative cap is no cap too, as on the command line."""

    model_config = ConfigDict(strict=True, extra="forbid")

    allowed_kinds: list[str]
    allowed_hosts: list[str]
    allowed_db_targets: list[str]
    actions_per_hour: int | None
    pending_at_once: int | None
    review_required: bool
    rehearsal_required: bool

    def limits(self) -> Limits:
        return Limits(
            allowed_kinds=self.allowed_kinds,
            allowed_hosts=self.allowed_hosts,
            allowed_db_targets=self.allowed_db_targets,
            actions_per_hour=cap_from_number(self.actions_per_hour),
            pending_at_once=cap_from_number(self.pending_at_once),
            review_required=self.review_required,
            rehearsal_required=self.rehearsal_required,
        )


@router.get("/{token_id}/limits", response={200: LimitsOut, **ERRORS}, summary="A token's limits")
async def get_token_limits(request: HttpRequest, token_id: int) -> HttpResponse:
    """The damage limits of one of the owner's tokens (empty: none); anyone else's is a 404."""
    owner = request.auth.owner  # type: ignore[attr-defined]
    target = await sync_to_async(owned_token)(owner, token_id)
    limits = await sync_to_async(token_limits)(target)
    return JsonResponse(limits.as_json())


def _limits_set(caller: ApiToken, token_id: int, wanted: Limits) -> Limits:
    target = owned_token(caller.owner, token_id)
    own_limits_refuse(caller=caller, target=target)
    limited_setter_refuse(caller=caller)
    return token_limits_set(token=target, limits=wanted)


@router.put(
    "/{token_id}/limits", response={200: LimitsOut, **SET_ERRORS}, summary="Set a token's limits"
)
async def put_token_limits(request: HttpRequest, token_id: int, body: LimitsIn) -> HttpResponse:
    """Replace the damage limits of another of the owner's tokens. The token asking must have
    no limits itself and cannot set its own (403); a bad value is a 400 and changes nothing."""
    caller = request.auth  # type: ignore[attr-defined]
    try:
        limits = await sync_to_async(_limits_set)(caller, token_id, body.limits())
    except SetterRefused as exc:
        raise ApiError(403, str(exc)) from None
    except LimitsInvalid as exc:
        raise ApiError(400, str(exc)) from None
    return JsonResponse(limits.as_json())
