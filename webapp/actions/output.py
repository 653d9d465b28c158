"""An action as the API answers it: its JSON, and the wait (or the NDJSON stream) until it has
settled.

Output comes from the run's stored chunks, already masked by the worker (webapp.runs.sink), read
in `seq` order after the last one sent: each chunk exactly once, whichever process ran it.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connection

from webapp.actions import services
from webapp.actions.classes import action_class
from webapp.actions.rehearsals import rehearsal_for
from webapp.actions.state import action_state, change_json
from webapp.agents.exec_services import in_pool
from webapp.queries.models import Query
from webapp.runs.listen import any_event, run_events
from webapp.runs.models import FINAL_STATUSES, Run, RunChunk
from webapp.runs.selectors import run_chunks_after
from webapp.workspaces.models import ChangeStatus, PendingChange, WorkspaceUse

T = TypeVar("T")

# The rows are read again when the run's events say something moved (webapp.runs.listen), and
# at least this often should an event be lost on the way.
SAFETY_POLL_S = 0.5
# A wait longer than this answers with the action as it stands (GET it again later).
MAX_WAIT_S = 900.0
CHUNK_BATCH = 500


def end_event(event: dict[str, Any]) -> bool:
    """A run's final status, or its change leaving `running` (pending, kept, discarded...):
    what a wait for an action to settle cares about. The run starting, its output, and a
    change still being made are not worth a read of the rows."""
    if event.get("type") == "run.status":
        return event["status"]["status"] in FINAL_STATUSES
    if event.get("type") == "change.updated":
        return event["change"]["status"] != ChangeStatus.RUNNING
    return False


def _safety_s(deadline: float) -> float:
    """How long to wait for an event before reading the rows again anyway."""
    return max(0.0, min(SAFETY_POLL_S, deadline - time.monotonic()))


def with_own_connection(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` for a pool thread: the database connection it opened is closed after it."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return call


def run_streams(run: Run | None) -> dict[str, str]:
    """{"stdout", "stderr"} of `run` (system lines with stderr)."""
    return run_streams_for([run] if run is not None else []).get(
        run.pk if run else 0, {"stdout": "", "stderr": ""}
    )


def run_streams_for(runs: list[Run]) -> dict[int, dict[str, str]]:
    """run_streams of each of `runs` (by run id), in one query however many."""
    out: dict[int, dict[str, list[str]]] = {run.pk: {"stdout": [], "stderr": []} for run in runs}
    rows = RunChunk.objects.filter(run__in=runs).order_by("run_id", "seq")
    for run_id, stream, text in rows.values_list("run_id", "stream", "text"):
        out[run_id]["stderr" if stream != "stdout" else "stdout"].append(text)
    return {
        run_id: {name: "".join(parts) for name, parts in streams.items()}
        for run_id, streams in out.items()
    }


def action_json(query: Query) -> dict[str, Any]:
    """What the API says about an action: {id, status, kind, workspace, change, stdout, stderr,
    exit_code, error, reverse}."""
    query = Query.objects.select_related("action").get(pk=query.pk)
    state = action_state(query)
    forward = run_streams(state.forward)
    reverse = None
    if state.reverse is not None:
        reverse = {
            "status": state.reverse.status,
            "exit_code": state.reverse.exit_code,
            "error": state.reverse.error,
            **run_streams(state.reverse),
            # fs: what the kept reverse program left different (workspaces._reverse_check)
            "undo_check": PendingChange.objects.filter(run=state.reverse)
            .values_list("undo_check", flat=True)
            .first(),
            # rest: the probe's outcome, when the action declared one (workspaces.probes)
            "probe": state.reverse.probe,
        }
    action = getattr(query, "action", None)
    return {
        "id": query.pk,
        "status": state.status,
        "kind": query.kind,
        "intent": action.intent if action else query.prompt,
        "workspace": WorkspaceUse.objects.filter(query=query)
        .values_list("workspace_id", flat=True)
        .first(),
        "change": change_json(query, state, forward["stdout"]),
        "stdout": forward["stdout"],
        "stderr": forward["stderr"],
        "exit_code": state.forward.exit_code if state.forward else None,
        "error": state.reason,
        "reverse": reverse,
        "rehearsal": rehearsal_for(query),
        "class": action_class(query),
    }


def _state(query_id: int) -> tuple[bool, Run | None, bool]:
    """Whether the action has settled, the run whose output is followed (the latest), and
    whether an Undo's reverse program has ended leaving its change to keep."""
    state = action_state(Query.objects.get(pk=query_id))
    reverse = state.reverse
    to_keep = reverse is not None and reverse.is_final and not state.settled
    return state.settled, reverse or state.forward, to_keep


async def _settled(query_id: int) -> tuple[bool, Run | None]:
    """_state, keeping the reverse program's change on the way (the Undo asked for it): on a
    pool thread, as a db Keep waits for the transaction's holder to commit."""
    settled, run, to_keep = await sync_to_async(_state)(query_id)
    if to_keep:
        keep = with_own_connection(_reverse_settle)
        await in_pool(keep, query_id)
        settled, run, _ = await sync_to_async(_state)(query_id)
    return settled, run


def _reverse_settle(query_id: int) -> None:
    services.action_reverse_settle(query=Query.objects.get(pk=query_id))


async def action_settled(query_id: int) -> dict[str, Any]:
    """The action once it has settled (or as it stands after MAX_WAIT_S): the rows are read
    again when its run ends or its change moves."""
    deadline = time.monotonic() + MAX_WAIT_S
    async with run_events(end_event) as events:
        while time.monotonic() < deadline:
            settled, run = await _settled(query_id)
            if settled:
                break
            if run is not None and await events.follow(run.pk):
                continue  # joined just now: read once more, so nothing before it is missed
            await events.wait(_safety_s(deadline))
    return await sync_to_async(_json_by_id)(query_id)


def _json_by_id(query_id: int) -> dict[str, Any]:
    return action_json(Query.objects.get(pk=query_id))


def _chunks(run_id: int, after: int) -> list[dict[str, Any]]:
    return [
        {"type": "output", "seq": seq, "stream": stream, "text": text}
        for seq, stream, text in run_chunks_after(run_id, after).values_list(
            "seq", "stream", "text"
        )[:CHUNK_BATCH]
    ]


async def action_stream(query_id: int) -> AsyncIterator[bytes]:
    """NDJSON: {"type": "output", seq, stream, text} per chunk of the latest run as it comes,
    then {"type": "action", "action": {...}} once the action has settled."""
    deadline = time.monotonic() + MAX_WAIT_S
    following: int | None = None
    after = 0
    async with run_events(any_event) as events:
        while True:
            settled, run = await _settled(query_id)
            if run is not None and run.pk != following:
                following, after = run.pk, 0
                if await events.follow(run.pk):
                    continue  # joined just now: read once more, so nothing before it is missed
            lines = await sync_to_async(_chunks)(following, after) if following else []
            for line in lines:
                after = line["seq"]
                yield (json.dumps(line) + "\n").encode()
            if (settled and not lines) or time.monotonic() >= deadline:
                break
            if not lines:
                await events.wait(_safety_s(deadline))
    action = await sync_to_async(_json_by_id)(query_id)
    yield (json.dumps({"type": "action", "action": action}) + "\n").encode()


# A db holder in another process (a Celery worker) notices a decision within its polling
# interval (webapp.workspaces.db_runs.POLL_S); Keep and Discard wait this long for its answer.
DECISION_WAIT_S = 15.0
_DECIDING = (ChangeStatus.KEEP_REQUESTED, ChangeStatus.DISCARD_REQUESTED)


def _deciding(query_id: int) -> int | None:
    """The run whose change is being decided (its holder has yet to apply it), else None."""
    change = action_state(Query.objects.get(pk=query_id)).change
    return change.run_id if change is not None and change.status in _DECIDING else None


async def action_decided(query_id: int) -> dict[str, Any]:
    """The action once its Keep or Discard has been applied (the db transaction committed or
    rolled back by its holder, wherever it runs), or as it stands after DECISION_WAIT_S: the
    rows are read again when the change moves."""
    deadline = time.monotonic() + DECISION_WAIT_S
    async with run_events(end_event) as events:
        while time.monotonic() < deadline:
            run_id = await sync_to_async(_deciding)(query_id)
            if run_id is None:
                break
            if await events.follow(run_id):
                continue  # joined just now: read once more, so nothing before it is missed
            await events.wait(_safety_s(deadline))
    return await sync_to_async(_json_by_id)(query_id)
