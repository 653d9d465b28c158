"""The db kind driven as the web app drives it: prepared, one real sandbox, finished."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from executor.kinds import db, db_process
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
    **options: Any,
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
        **options,
    ) as job:
        result = backend.run(job.spec, limits=job.limits, mounts=job.mounts)
        return result, job.finish(result)


def in_db_process(monkeypatch, prelude: str) -> None:
    """Run `prelude` in every db process started from now on (the session lives there, so
    a sabotage must switch its guard off in that process, not in the test's). Preludes of
    one test add up, in order."""
    preludes = getattr(db_process, "_test_preludes", "") + prelude
    monkeypatch.setattr(db_process, "_test_preludes", preludes, raising=False)
    monkeypatch.setattr(db_process, "CHILD_CODE", db_process.child_code(preludes))


def switch_off_sqlite_guards(monkeypatch) -> None:
    """All three layers between a program and the host's files, for the sabotage tests: the
    authorizer, the attach limit of 0, and the session's stop once its transaction ended."""
    in_db_process(
        monkeypatch,
        "import sqlite3\n"
        "from executor.kinds import db_sqlite\n"
        "db_sqlite.sqlite_authorize = lambda *args: None\n"
        "sqlite3.SQLITE_LIMIT_ATTACHED = sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH\n"
        "db_sqlite.SqliteSession._usable = lambda self: None\n",
    )


def switch_off_postgres_parser(monkeypatch) -> None:
    """The PostgreSQL statement check, for the sabotage tests: every statement passes."""
    in_db_process(
        monkeypatch,
        "from executor.kinds import db_postgres\ndb_postgres.check_postgres = lambda sql: False\n",
    )
