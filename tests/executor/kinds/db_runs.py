"""The db kind driven as the web app drives it: prepared, one real sandbox, finished."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from executor.kinds import db, db_sqlite
from executor.kinds.db import DbOutcome, Target
from executor.kinds.sandbox import sandbox_host_uid
from executor.result import RunResult
from executor.spec import RunSpec


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
        owner_uid=sandbox_host_uid(backend),
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
