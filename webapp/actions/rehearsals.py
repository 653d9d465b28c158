"""Rehearsals of an action: its forward program, then its reverse program, on a throwaway copy
(webapp.workspaces.rehearsals), and the verdict kept on the action.

The host reads the states (a no-follow scan of the copy; the db process's own connection); the
programs only ever see the copy. The verdict carries a digest of the code it rehearsed, so the
query page can mark it stale once the code changes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from webapp.actions.models import Action
from webapp.credentials.masking import mask_text
from webapp.executor_glue import WorkspaceBusy
from webapp.queries.models import Query
from webapp.workspaces.rehearsals import query_rehearse

logger = logging.getLogger(__name__)

REHEARSABLE = ("fs", "db")
ONLY_REASON = "Rehearsal only: the forward program was not run for real."


class RehearsalRefused(Exception):
    """This action cannot be rehearsed as it stands; nothing ran. `status` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def code_digest(query: Query) -> str:
    """What a verdict is about: the kind and both programs as they are now."""
    text = "\0".join((query.kind, query.forward_code, query.reverse_code))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def rehearsal_for(query: Query) -> dict[str, Any] | None:
    """The action's last verdict, with `stale` set when the code changed since."""
    verdict = Action.objects.filter(query=query).values_list("rehearsal", flat=True).first()
    if not verdict:
        return None
    return {**verdict, "stale": verdict.get("code") != code_digest(query)}


def diff_lines(verdict: dict[str, Any]) -> list[str]:
    """The verdict's differences, one line each, as the query page shows them."""
    lines = []
    for item in verdict.get("diff") or []:
        text = f"{item.get('path') or item.get('table')}: {item.get('change')}"
        if item.get("what"):
            text += f" ({', '.join(item['what'])})"
        if item.get("missing_rows"):
            text += f" missing {'; '.join(item['missing_rows'])}"
        if item.get("extra_rows"):
            text += f" extra {'; '.join(item['extra_rows'])}"
        lines.append(text)
    return lines


def rehearsal_possible(kind: str, reverse_code: str) -> None:
    """RehearsalRefused (400) unless `kind` has a copy to rehearse on and there is a reverse
    program."""
    if kind not in REHEARSABLE:
        raise RehearsalRefused(
            400,
            f"a {kind} action cannot be rehearsed: only fs and db actions have a copy to "
            "rehearse on (a rest call would reach the real service)",
        )
    if not reverse_code.strip():
        raise RehearsalRefused(400, "there is no reverse program to rehearse")


def rehearsal_ready(query: Query, credentials: dict[str, str]) -> None:
    """RehearsalRefused (400) unless the query can be rehearsed with these credentials."""
    rehearsal_possible(query.kind, query.reverse_code)
    missing = [name for name in query.credential_names if not credentials.get(name)]
    if missing:
        raise RehearsalRefused(400, f"Missing credential: {', '.join(missing)}; give it again")


def rehearsal_stop(*, query: Query, why: str) -> None:
    """The action ends with its rehearsal: its forward program is not run for real, and
    action_state says `why`."""
    verdict = Action.objects.filter(query=query).values_list("rehearsal", flat=True).first()
    Action.objects.filter(query=query).update(rehearsal={**(verdict or {}), "stopped": why})
    logger.info("action stopped after its rehearsal", extra={"query_id": query.pk})


def action_rehearse(
    *, query: Query, credentials: dict[str, str], wall_time_s: float | None = None
) -> dict[str, Any]:
    """Rehearse the action now (on this thread: two sandbox runs), keep the verdict on it and
    return it. RehearsalRefused when it cannot be rehearsed (kind, no reverse program, a
    credential missing, the workspace busy)."""
    rehearsal_ready(query, credentials)
    try:
        verdict = query_rehearse(query, dict(credentials), wall_time_s)
    except WorkspaceBusy as exc:
        raise RehearsalRefused(409, str(exc)) from None
    verdict["code"] = code_digest(query)
    # A row of the user's data may hold a credential's value: masked like run output.
    secrets = [value for value in credentials.values() if value]
    verdict = json.loads(mask_text(json.dumps(verdict), secrets))
    if not Action.objects.filter(query=query).update(rehearsal=verdict):
        Action.objects.get_or_create(
            query=query, defaults={"owner_id": query.owner_id, "rehearsal": verdict}
        )
    logger.info(
        "action rehearsed",
        extra={"query_id": query.pk, "restored": verdict["restored"], "kind": query.kind},
    )
    return {**verdict, "stale": False}
