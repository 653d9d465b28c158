"""The rehearsal panel beside the query page's editors (fs and db queries)."""

from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings

from webapp.actions.classes import action_class
from webapp.actions.rehearsal_jobs import NONE, rehearsal_state
from webapp.actions.rehearsals import REHEARSABLE, diff_lines
from webapp.queries.models import Query

register = template.Library()


@register.inclusion_tag("actions/_rehearsal.html")
def rehearsal_panel(query: Query) -> dict[str, Any]:
    state: dict[str, Any] = rehearsal_state(query) if query.kind in REHEARSABLE else {"state": NONE}
    verdict = state.get("verdict")
    return {
        "query": query,
        "rehearsable": query.kind in REHEARSABLE,
        "state": state,
        "wait_s": settings.UNDOABLE_REHEARSAL_WAIT_S,
        "verdict": verdict,
        "lines": diff_lines(verdict) if verdict else [],
        "counters": [
            f"{name} {moved.get('before')} → {moved.get('after')}"
            for name, moved in ((verdict or {}).get("counters") or {}).items()
        ],
        "action_class": action_class(query),
    }


@register.filter(name="action_class")
def action_class_of(query: Query) -> str:
    """`{{ query|action_class }}`: reversible, compensable or irreversible."""
    return action_class(query)
