"""The db kind on the worker: the host holds the run's transaction until Keep, Discard or timeout.

The sandbox only sends statements to the host's broker (executor/kinds/db.py); once the code
has run, the run is over and its worker slot free. A holder thread keeps the transaction open
in this process and waits for the person's choice, which the Keep/Discard services write to the
PendingChange row (decisions.py wakes it at once in this process; from any other, it notices
the row within POLL_S). Nobody choosing within UNDOABLE_DB_PENDING_TIMEOUT_S discards it
(rolls it back), and the change says so.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from webapp import lifecycle
from webapp.executor_glue import (
    DbCaps,
    DbTarget,
    ExecutorError,
    Limits,
    PendingDb,
    RunResult,
    RunSpec,
    ServerTarget,
    SqliteTarget,
    StatementLog,
    UndoCheck,
    executor_get,
)
from webapp.queries.models import Query
from webapp.runs.jobs import KindJob
from webapp.runs.models import Run
from webapp.workspaces import decisions
from webapp.workspaces.jobs import allow_private
from webapp.workspaces.models import ChangeStatus, PendingChange, control_base
from webapp.workspaces.runs import STARTED
from webapp.workspaces.services import (
    change_set,
    change_settle,
    workspace_for_query,
    workspace_fs,
)
from webapp.workspaces.statement_outcome import statement_outcome

logger = logging.getLogger(__name__)
POLL_S = 0.5


def pending_timeout_s() -> float:
    return float(settings.UNDOABLE_DB_PENDING_TIMEOUT_S)


def db_caps() -> DbCaps:
    """How many db processes (running or pending db runs) a person and this host hold at once:
    the slot folder sits beside the control folders, shared by every process of the host."""
    return DbCaps(
        control_base().parent / "db-slots",
        per_host=settings.UNDOABLE_DB_PROCESSES_PER_HOST,
        per_user=settings.UNDOABLE_DB_PROCESSES_PER_USER,
    )


def db_target(query: Query, env: dict[str, str]) -> tuple[DbTarget, str]:
    """The database a db query works on, and the credential naming it: a server (PostgreSQL,
    MariaDB/MySQL) when the workspace's URL credential has a value in `env`, else the
    workspace's SQLite file."""
    workspace = workspace_for_query(query)
    url_env = workspace.postgres_url_credential
    url = env.get(url_env, "")
    if url:
        # The URL's scheme picks the engine (postgresql://, mysql://, mariadb://); an unknown
        # one is refused here, before anything is held, with a message that names no secret.
        return ServerTarget(url=url), url_env
    return SqliteTarget(workspace=workspace_fs(workspace), path=workspace.sqlite_path), url_env


def db_options(query: Query, limits: Limits, url_env: str) -> dict[str, Any]:
    """What each db lifecycle of `query` is prepared with beside its spec, target and run id
    (db_prepared; a rehearsal's too)."""
    return {
        "control_base": control_base(),
        "allow_private": allow_private(),
        "owner_uid": executor_get().sandbox_host_uid,
        "max_db_bytes": limits.workdir_quota_mib * 1024 * 1024,
        "hide_env": (url_env,),
        "memory_mib": settings.UNDOABLE_DB_MEMORY_MIB,
        "caps": db_caps(),
        "owner": str(query.owner_id),
    }


@contextlib.contextmanager
def db_job(run: Run, spec: RunSpec, limits: Limits) -> Iterator[KindJob]:
    target, url_env = db_target(run.query, spec.env)
    engine = target.engine if isinstance(target, ServerTarget) else "sqlite"
    with executor_get().db_prepared(
        spec,
        limits=limits,
        target=target,
        run_id=str(run.pk),
        **db_options(run.query, limits, url_env),
    ) as job:
        change = PendingChange.objects.create(run=run, kind="db", engine=engine)

        def settle(result: RunResult) -> None:
            outcome = job.finish(result)
            change.changes = statement_list(outcome.log)
            if outcome.pending is None:
                change_set(change, ChangeStatus.FAILED, outcome.message, from_=STARTED)
                return
            timeout_s = pending_timeout_s()
            decisions.listen(change.pk)  # before PENDING shows: a Keep must find its holder
            change.deadline = timezone.now() + timedelta(seconds=timeout_s)
            change_set(change, ChangeStatus.PENDING, _listing_note(outcome.log), from_=STARTED)
            holder = threading.Thread(
                target=hold_transaction,
                args=(change.pk, outcome.pending, timeout_s),
                name=f"change-{change.pk}-db",
                daemon=True,
            )
            holder.start()

        kind_run = KindJob(job.spec, job.limits, job.mounts, settle)
        try:
            yield kind_run
        finally:
            if not kind_run.finished:
                change_set(
                    change,
                    ChangeStatus.FAILED,
                    "The run did not start; the transaction was rolled back.",
                    from_=STARTED,
                )


def statement_list(log: StatementLog) -> list[dict]:
    """The statements as change-list entries (the panel shows `path` and `diff`)."""
    return [
        {
            "path": entry["sql"],
            "action": "statement",
            "kind": "sql",
            "diff": "",
            "summary": statement_outcome(entry["sql"], entry["outcome"]),
            "refused": entry["outcome"] if entry["outcome"].startswith("refused") else "",
        }
        for entry in log.entries
    ]


TIMEOUT_REASON = "Discarded automatically: nobody chose Keep or Discard in time (rolled back)."


def _listing_note(log: StatementLog) -> str:
    more = log.total - len(log.entries)
    return f"{more} more statement(s) not listed." if more > 0 else ""


def hold_transaction(change_id: int, pending: PendingDb, timeout_s: float) -> None:
    """Wait for Keep or Discard (or the deadline) and apply it to the held transaction."""
    wake = decisions.listen(change_id).wake
    close_old_connections()
    deadline = time.monotonic() + timeout_s
    choice = "timeout"
    try:
        while (left := deadline - time.monotonic()) > 0:
            wake.wait(min(POLL_S, left))
            wake.clear()
            try:
                status = (
                    PendingChange.objects.filter(pk=change_id)
                    .values_list("status", flat=True)
                    .first()
                )
            except DatabaseError:  # the database restarting: keep holding, ask again
                close_old_connections()
                continue
            if status in (ChangeStatus.KEEP_REQUESTED, ChangeStatus.DISCARD_REQUESTED, None):
                choice = "keep" if status == ChangeStatus.KEEP_REQUESTED else "discard"
                break
        else:
            choice = _timeout_claim(change_id)
        status, message, check = _apply(pending, choice)
        timed_out = choice == "timeout" and status == ChangeStatus.DISCARDED
        # The holder settles only the choice it applied: a change the reaper ended meanwhile
        # keeps the reaper's word.
        asked = ChangeStatus.KEEP_REQUESTED if choice == "keep" else ChangeStatus.DISCARD_REQUESTED
        change_settle(
            change_id=change_id,
            status=status,
            message=message,
            timed_out=timed_out,
            from_=[asked],
            undo_check=check.as_json() if check is not None else None,
        )
        logger.info(
            "db change settled", extra={"change_id": change_id, "status": status, "choice": choice}
        )
    except Exception:
        logger.exception("db change holder failed", extra={"change_id": change_id})
        with contextlib.suppress(ExecutorError):
            pending.undo()
    finally:
        decisions.forget(change_id)
        connection.close()


def _timeout_claim(change_id: int) -> str:
    """The deadline passed: claim the change for the timeout (pending -> discard requested) in
    one conditional update, so that a Keep or Discard written at the same moment and the
    timeout have one winner; the choice to apply ("timeout", or the one that won)."""
    if lifecycle.change_move(
        change_id,
        ChangeStatus.DISCARD_REQUESTED,
        from_=[ChangeStatus.PENDING],
        updated_at=timezone.now(),
    ):
        return "timeout"
    status = PendingChange.objects.filter(pk=change_id).values_list("status", flat=True).first()
    return "keep" if status == ChangeStatus.KEEP_REQUESTED else "discard"


def _apply(pending: PendingDb, choice: str) -> tuple[str, str, UndoCheck | None]:
    """The change's status and message, and a rollback's verification (SQLite's)."""
    try:
        if choice == "keep":
            pending.keep()
            return ChangeStatus.KEPT, "Committed.", None
        check = pending.undo()
    except ExecutorError as exc:
        return ChangeStatus.FAILED, f"{exc} The transaction was rolled back.", None
    if choice == "timeout":
        return ChangeStatus.DISCARDED, TIMEOUT_REASON, check
    return ChangeStatus.DISCARDED, "Discarded; the transaction was rolled back.", check
