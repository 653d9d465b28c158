"""The db kind on the worker: hold the sandbox's transaction until Keep, Undo or the deadline.

A relay thread per run waits for the driver's "pending", records the deadline, then waits for
the person's choice and hands it to the driver. The choice is written to the PendingChange row
by the Keep/Undo services (any process); in the embedded runner a threading.Event wakes the
relay at once, across processes it notices the row within POLL_S.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from executor import Limits, RunResult, RunSpec
from executor.kinds.db import DEFAULT_TIMEOUT_S, DbControl, DbTarget
from executor.kinds.fs import FsWorkspace, PendingFs
from executor.kinds.sandbox import Mount, sandbox_host_uid
from webapp.executor_glue import ensure_executor
from webapp.queries.models import Run
from webapp.workspaces.models import ChangeStatus, PendingChange
from webapp.workspaces.services import workspace_for_query

logger = logging.getLogger(__name__)
POLL_S = 0.5
Finalize = Callable[[RunResult | None], None]

_wakeups: dict[int, threading.Event] = {}
_wakeups_lock = threading.Lock()


def decision_made(change_id: int) -> None:
    """Wake this process's relay for `change_id`, if it lives here."""
    with _wakeups_lock:
        event = _wakeups.get(change_id)
    if event is not None:
        event.set()


def pending_timeout_s() -> float:
    return float(getattr(settings, "DB_PENDING_TIMEOUT_S", DEFAULT_TIMEOUT_S))


def prepare_db(
    run: Run, spec: RunSpec, limits: Limits
) -> tuple[RunSpec, Limits, Finalize, Sequence[Mount]]:
    from webapp.workspaces.runs import control_base

    workspace = workspace_for_query(run.query)
    url_env = workspace.postgres_url_credential
    if spec.env.get(url_env):
        target = DbTarget(postgres_url_env=url_env)
    else:
        target = DbTarget(sqlite_path=workspace.sqlite_path)
    allow_private = bool(getattr(settings, "EXECUTOR_EGRESS_ALLOW_PRIVATE", False))
    control = DbControl(control_base(), allow_private=allow_private)
    backend = ensure_executor()
    fs: PendingFs | None = None
    try:
        timeout_s = pending_timeout_s()
        driver, run_limits, mounts = control.prepare(spec, limits, target, timeout_s=timeout_s)
        if target.sqlite_path:
            folder = FsWorkspace(workspace.root, workspace.state_dir)
            fs = folder.begin(str(run.pk), uid=sandbox_host_uid(backend))
            mounts.append(Mount(fs.tree, "/workspace", writable=True))
    except BaseException:
        if fs is not None:
            fs.undo()
        control.close()
        raise
    engine = "sqlite" if target.sqlite_path else "postgres"
    change = PendingChange.objects.create(run=run, kind="db", engine=engine)
    wake = threading.Event()
    with _wakeups_lock:
        _wakeups[change.pk] = wake
    outcome: dict[str, str] = {}
    relay = threading.Thread(
        target=_relay,
        args=(change.pk, control, wake, timeout_s, run_limits.wall_time_s, outcome),
        name=f"run-{run.pk}-db",
        daemon=True,
    )
    relay.start()

    def finalize(result: RunResult | None) -> None:
        if result is None:
            # No sandbox ran (the backend refused or failed): stop the relay waiting for it.
            control.events.put({"event": "closed"})
        relay.join(timeout=30)
        with _wakeups_lock:
            _wakeups.pop(change.pk, None)
        control.close()
        final = outcome.get("final", "")
        ok = result is not None and result.ok
        status, message = _final_status(final, ok)
        if fs is not None:
            if status == ChangeStatus.KEPT:
                fs.keep()
            else:
                fs.undo()
        PendingChange.objects.filter(pk=change.pk).update(
            status=status, message=message, updated_at=timezone.now()
        )

    # The sandbox waits for the decision; its wall limit already includes the timeout.
    return driver, run_limits, finalize, mounts


def _final_status(final: str, ok: bool) -> tuple[str, str]:
    if final == "committed" and ok:
        return ChangeStatus.KEPT, "Committed."
    if final == "rolled_back:undo":
        return ChangeStatus.UNDONE, "Rolled back."
    if final == "rolled_back:timeout":
        return (
            ChangeStatus.ROLLED_BACK_TIMEOUT,
            "Nobody chose in time: rolled back automatically.",
        )
    return ChangeStatus.DISCARDED, "The run did not succeed; the transaction was rolled back."


def _relay(
    change_id: int,
    control: DbControl,
    wake: threading.Event,
    timeout_s: float,
    wall_s: float,
    outcome: dict[str, str],
) -> None:
    close_old_connections()
    try:
        first = control.wait_event(wall_s + 5)
        if first is None or first.get("event") != "pending":
            outcome["final"] = _outcome(first)
            return
        deadline = timezone.now() + timedelta(seconds=timeout_s)
        PendingChange.objects.filter(pk=change_id, status=ChangeStatus.RUNNING).update(
            status=ChangeStatus.PENDING, deadline=deadline, updated_at=timezone.now()
        )
        while timezone.now() < deadline + timedelta(seconds=5) and not control.closed:
            wake.wait(POLL_S)
            wake.clear()
            status = PendingChange.objects.filter(pk=change_id).values_list("status", flat=True)
            choice = status.first()
            if choice in (ChangeStatus.KEEP_REQUESTED, ChangeStatus.UNDO_REQUESTED):
                control.decide(commit=choice == ChangeStatus.KEEP_REQUESTED)
                break
        while (event := control.wait_event(timeout_s + 10)) is not None:
            if event.get("event") in ("committed", "rolled_back"):
                outcome["final"] = _outcome(event)
                break
            if event.get("event") == "closed":
                break
    except Exception:
        logger.exception("db relay failed", extra={"change_id": change_id})
    finally:
        connection.close()


def _outcome(event: dict | None) -> str:
    if event is None:
        return ""
    if event.get("event") == "committed":
        return "committed"
    if event.get("event") == "rolled_back":
        return f"rolled_back:{event.get('reason', '')}"
    return ""
