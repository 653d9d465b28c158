"""The query page's sections that belong to the apps built on this one.

The page shows a query's runs and console (webapp.runs) and, for fs/db/rest queries, its
workspace panel (webapp.workspaces). Those apps import this one, so this one cannot import them:
each registers a section in its AppConfig.ready(), and the page merges what they return.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest

from webapp.queries.models import Query

# (request, query) -> template context; its "page_data" entries go into the page's JSON data.
Section = Callable[[HttpRequest, Query], dict[str, Any]]

_sections: list[Section] = []


def query_page_section_add(section: Section) -> None:
    """Add a section to every query page (once, however often ready() runs)."""
    if section not in _sections:
        _sections.append(section)


def query_page_sections(request: HttpRequest, query: Query) -> dict[str, Any]:
    """Every registered section's context for this query's page, in registration order."""
    context: dict[str, Any] = {}
    page_data: dict[str, Any] = {}
    for section in _sections:
        part = dict(section(request, query))
        page_data.update(part.pop("page_data", {}))
        context.update(part)
    context["page_data"] = page_data
    return context
