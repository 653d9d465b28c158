"""{% connections_panel %}: the Connections panel with the configured providers (public parts)."""

from __future__ import annotations

from typing import Any

from django import template

from webapp.connections.providers import providers_configured

register = template.Library()


@register.inclusion_tag("connections/_connections_panel.html")
def connections_panel() -> dict[str, Any]:
    return {"oauth_providers": [p.public() for p in providers_configured().values()]}
