"""The db kind driven as the web app drives it: prepared, one real sandbox, finished."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg._preparing import Prepare, PrepareManager

from executor.kinds import db, db_sqlite
from executor.kinds.db import DbOutcome, Target
from executor.limits import Limits
from executor.result import RunResult
from executor.spec import RunSpec

# finish() of a run whose statement outlives it: the session's cancel is bounded by a few
# seconds; without it, finish() waits for the statement (the session's own limit is 600 s).
FINISH_BOUND_S = 20.0


def run_db(
    backend,
    limits,
    place: Path,
    target: Target,
    code: str,
    *,
    env: dict[str, str] | None = None,
    hide_env: tuple[str, ...] = (),
    allow_private: bool = True,
) -> tuple[RunResult, DbOutcome]:
    with db.prepared(
        RunSpec(code=code, env=env or {}),
        limits=limits,
        target=target,
        control_base=place,
        run_id="r1",
        allow_private=allow_private,
        hide_env=hide_env,
    ) as job:
        result = backend.run(job.spec, limits=job.limits, mounts=job.mounts)
        return result, job.finish(result)


def switch_off_sqlite_guards(monkeypatch) -> None:
    """All three layers between a program and the host's files, for the sabotage tests: the
    authorizer, the attach limit of 0, and the session's stop once its transaction ended."""
    monkeypatch.setattr(db_sqlite, "sqlite_authorize", lambda *args: None)
    monkeypatch.setattr(sqlite3, "SQLITE_LIMIT_ATTACHED", sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH)
    monkeypatch.setattr(db_sqlite.SqliteSession, "_usable", lambda self: None)


def run_past_its_end(
    backend,
    place: Path,
    target: Target,
    code: str,
    *,
    sandbox_s: float = 3,
    while_stuck: Callable[[], list[str]] = list,
    unstick: Callable[[object], None] = lambda session: None,
) -> tuple[RunResult, list[str]]:
    """A run whose sandbox ends (its wall time, a Stop, a crash) while a statement still runs.

    The session is opened for 600 s, the sandbox gets `sandbox_s`: the session's own time
    limits are out of play, so only the host's cancel can end the statement. Returns the
    sandbox's result and what is wrong: finish() not back within FINISH_BOUND_S, plus what
    `while_stuck` (e.g. the server's active statements) reports right after. `unstick(session)`
    ends a statement the host left running, so that a sabotaged run can be cleaned up.
    """
    found: list[str] = []
    with db.prepared(
        RunSpec(code=code),
        limits=Limits(wall_time_s=600, cpu_time_s=600),
        target=target,
        control_base=place,
        run_id="r1",
        allow_private=True,
    ) as job:
        result = backend.run(
            job.spec, limits=Limits(wall_time_s=sandbox_s, cpu_time_s=sandbox_s), mounts=job.mounts
        )
        outcome: list[DbOutcome] = []
        finisher = threading.Thread(target=lambda: outcome.append(job.finish(result)), daemon=True)
        finisher.start()
        finisher.join(FINISH_BOUND_S)
        if finisher.is_alive():
            found.append(f"finish() still waits {FINISH_BOUND_S:.0f} s after the run ended")
        found += while_stuck()
        if finisher.is_alive():
            unstick(job._broker.session)  # the cleanup of a sabotaged run
            finisher.join()
        if outcome and outcome[0].pending is not None:
            outcome[0].pending.undo()
    return result, found


def switch_off_extended_protocol(monkeypatch) -> None:
    """For the sabotage tests: statements without parameters go by psycopg's simple protocol
    again, which runs every statement the server reads in a text. The host asks for binary
    results (no-row statements) or a pipeline (executemany) only to get the extended one;
    psycopg's executemany also prepares its statement, unless its prepared cache is off."""
    execute = psycopg.RawCursor.execute

    def simple(self, query, params=None, *, prepare=None, binary=None):
        return execute(self, query, params, prepare=prepare)

    monkeypatch.setattr(psycopg.RawCursor, "execute", simple)
    monkeypatch.setattr(psycopg.Connection, "pipeline", lambda self: contextlib.nullcontext())
    monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    monkeypatch.setattr(PrepareManager, "get", lambda self, query, prepare=None: (Prepare.NO, b""))
