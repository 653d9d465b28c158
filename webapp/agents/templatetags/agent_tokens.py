"""Tags that let templates/agents/_tokens.html load its own data wherever it is included."""

from __future__ import annotations

from typing import Any

from django import template
from django.db.models import QuerySet

from webapp.agents.models import ApiToken
from webapp.agents.tokens import token_list_for_user

register = template.Library()


@register.simple_tag(takes_context=True)
def api_tokens_for_user(context: dict[str, Any]) -> QuerySet[ApiToken]:
    return token_list_for_user(context["request"].user)
