"""Every action's class, shown wherever the action is (page, inbox, API, CLI):

- `reversible`: its undo is proven, by the host (Discard or rollback of a pending fs/db change)
  or by a rehearsal that found the reverse program restores the state;
- `compensable`: a reverse program that cannot be proven (a rest call: no copy of the service
  to rehearse on);
- `irreversible`: said so by the LLM's proposal or the person (Query.reversible), or nothing
  to take it back with.
"""

from __future__ import annotations

from typing import Literal

from webapp.queries.models import Query

ActionClass = Literal["reversible", "compensable", "irreversible"]
CLASSES: tuple[ActionClass, ...] = ("reversible", "compensable", "irreversible")


def action_class(query: Query) -> ActionClass:
    if not query.reversible:
        return "irreversible"
    if query.kind in ("fs", "db"):
        return "reversible"  # a pending change is discarded (rolled back) by the host
    if query.kind == "rest" and query.reverse_code.strip():
        return "compensable"
    return "irreversible"
