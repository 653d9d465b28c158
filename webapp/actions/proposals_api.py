"""/api/v1/proposals: the server's LLM proposes an action's forward and reverse code
(shared/DESIGN.md "LLM proposal"); nothing runs and nothing is saved. `undoable do` asks here,
then shows both programs to its person before anything runs.

One implementation: the same webapp.llm.propose_action the query page uses.
"""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router, Schema
from pydantic import BaseModel, ConfigDict, Field, field_validator

from webapp import llm
from webapp.actions.api import (
    MAX_CREDENTIALS,
    MAX_HOSTS,
    check_credential_names,
    check_host_names,
)
from webapp.admission.gate import spend_rate
from webapp.agents.exec_api import ERRORS, ErrorOut, quota_key
from webapp.agents.exec_services import in_pool
from webapp.agents.schemas import ApiError

router = Router(tags=["actions"])

MAX_PROMPT_CHARS = 4000


class ProposalIn(BaseModel):
    """Only credential NAMES come here and go to the model, never a value."""

    model_config = ConfigDict(strict=True, extra="forbid")

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    kind: Literal["python", "fs", "db", "rest"] = "python"
    hosts: list[str] = Field(default_factory=list, max_length=MAX_HOSTS)
    credentials: list[str] = Field(default_factory=list, max_length=MAX_CREDENTIALS)

    @field_validator("credentials")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        check_credential_names(value)
        return value

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        check_host_names(value)
        return value


class ProposalOut(Schema):
    forward_code: str
    reverse_code: str
    explanation: str
    credentials: list[str]
    hosts: list[str]
    reversible: bool


@router.post(
    "",
    response={200: ProposalOut, 502: ErrorOut, **ERRORS},
    summary="Propose an action's forward and reverse code",
)
async def create_proposal(request: HttpRequest, payload: ProposalIn) -> HttpResponse:
    """The LLM's proposal for `prompt`: `forward_code`, `reverse_code`, `explanation`, the
    `credentials` (names) and `hosts` the code uses, and whether it is `reversible`. 503 when no
    LLM is configured, 502 when it failed or answered without code."""
    if not payload.prompt.strip():
        raise ApiError(400, "prompt is empty")
    await in_pool(spend_rate, quota_key(request))
    try:
        proposal = await in_pool(
            llm.propose_action,
            prompt=payload.prompt,
            kind=payload.kind,
            credential_names=list(payload.credentials),
            hosts=list(payload.hosts),
        )
    except llm.LLMNotConfigured as exc:
        raise ApiError(503, str(exc)) from None
    except llm.LLMError as exc:
        raise ApiError(502, str(exc)) from None
    return JsonResponse(
        {
            "forward_code": proposal.forward_code,
            "reverse_code": proposal.reverse_code,
            "explanation": proposal.explanation,
            "credentials": proposal.credentials,
            "hosts": proposal.hosts,
            "reversible": proposal.reversible,
            # an extension (docs/api.md), there when the model declared one
            **({"probe": proposal.probe_code} if proposal.probe_code else {}),
        }
    )
