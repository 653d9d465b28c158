"""The run request's body: the editors' code (saved first) and what this one run needs."""

from __future__ import annotations

from pydantic import Field

from webapp.queries.forms import SaveBody
from webapp.runs.models import RunDirection


class RunBody(SaveBody):
    direction: RunDirection = RunDirection("forward")
    # Values for this run only; never stored. Only the query's credential_names are used.
    credentials: dict[str, str] = Field(default_factory=dict, max_length=50)
    # The phrase typed to confirm an irreversible forward run (checked by services.query_run).
    confirm: str = Field(default="", max_length=200)
    # The Connections panel's grant receipts {credential: receipt} (webapp/connections/oauth.py).
    grants: dict[str, str] = Field(default_factory=dict, max_length=50)
