"""Input shapes: a Django form for the prompt page, pydantic models for the page's JSON calls."""

from __future__ import annotations

import re

from django import forms
from pydantic import BaseModel, Field, field_validator

from webapp.json_body import BadJsonBody, json_body_loads
from webapp.queries.models import QueryKind

MAX_CODE_CHARS = 200_000
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


MAX_PROMPT_CHARS = 4000


class PromptTextarea(forms.Textarea):
    """The prompt box without the `maxlength` Django derives from max_length: a browser silently
    cuts pasted text at that length, while the server's error says by how much it is too long
    (and the page counts characters as the person types)."""

    def __init__(self) -> None:
        super().__init__(
            attrs={
                "rows": 4,
                "placeholder": "What should happen?",
                "data-max-chars": str(MAX_PROMPT_CHARS),
                "aria-describedby": "prompt-count",
            }
        )

    def get_context(self, name: str, value: object, attrs: dict | None) -> dict:
        context = super().get_context(name, value, attrs)
        context["widget"]["attrs"].pop("maxlength", None)
        return context


class ProposalContextForm(forms.Form):
    """What the browser tells the model about itself, never a secret: the names of the
    credentials it holds and the services it connected with their granted scopes."""

    credential_names = forms.CharField(required=False, widget=forms.HiddenInput)
    # JSON [{credential, scopes}] (no token); webapp/connections/scopes.py keeps only configured
    # providers' known scopes.
    connections = forms.CharField(required=False, max_length=8000, widget=forms.HiddenInput)

    def clean_credential_names(self) -> list[str]:
        raw = self.cleaned_data.get("credential_names") or ""
        return [n for n in (p.strip() for p in raw.split(",")) if _NAME.match(n)][:50]

    def clean_connections(self) -> object:
        try:
            return json_body_loads((self.cleaned_data.get("connections") or "[]").encode())
        except BadJsonBody:
            return []  # only context for the model: unreadable means none


class PromptForm(ProposalContextForm):
    prompt = forms.CharField(max_length=MAX_PROMPT_CHARS, widget=PromptTextarea())
    kind = forms.ChoiceField(choices=QueryKind.choices, initial=QueryKind.PYTHON)


class HandWrittenForm(forms.Form):
    prompt = forms.CharField(max_length=MAX_PROMPT_CHARS, required=False, widget=PromptTextarea())
    kind = forms.ChoiceField(choices=QueryKind.choices, initial=QueryKind.PYTHON)


def _names(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    for value in values:
        if not _NAME.match(value):
            raise ValueError(f"not a valid environment variable name: {value[:40]!r}")
    return list(dict.fromkeys(values))


class SaveBody(BaseModel):
    forward_code: str | None = Field(default=None, max_length=MAX_CODE_CHARS)
    reverse_code: str | None = Field(default=None, max_length=MAX_CODE_CHARS)
    credential_names: list[str] | None = Field(default=None, max_length=50)

    _check_names = field_validator("credential_names")(_names)
