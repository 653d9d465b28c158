"""The db kind driven as the web app drives it: prepared, one real sandbox, finished."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg._preparing import Prepare, PrepareManager

from executor.kinds import db, db_process
from executor.kinds.db import DbOutcome, Target
from executor.kinds.sandbox import sandbox_host_uid
from executor.limits import Limits
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


# The extended protocol switched off, as Python for a db process's prelude: statements without
# parameters go by psycopg's simple protocol again, which runs every statement the server reads
# in a text. The host asks for binary results (no-row statements) or a pipeline (executemany)
# only to get the extended one; psycopg's executemany also prepares its statement, unless its
# prepared cache is off.
EXTENDED_PROTOCOL_OFF = """
import contextlib, psycopg
from psycopg._preparing import Prepare, PrepareManager
_execute = psycopg.RawCursor.execute
def _simple(self, query, params=None, *, prepare=None, binary=None):
    return _execute(self, query, params, prepare=prepare)
psycopg.RawCursor.execute = _simple
psycopg.Connection.pipeline = lambda self: contextlib.nullcontext()
psycopg.Pipeline.is_supported = classmethod(lambda cls: False)
PrepareManager.get = lambda self, query, prepare=None: (Prepare.NO, b"")
"""
GUARDS_OFF = {
    "catalog writes": "from executor.kinds import sql_policy\n"
    "sql_policy._check_target = lambda target: None\n",
    "settings check": "from executor.kinds import db_postgres\n"
    "db_postgres.PostgresSession._check_settings = lambda self, row: None\n",
    "extended protocol": EXTENDED_PROTOCOL_OFF,
    "sequence rewinds": "from executor.kinds import sql_policy\n"
    "sql_policy._NOT_UNDOABLE_FUNCTIONS = set()\n"
    "sql_policy._rewinds = lambda node: False\n",
    "postgres cancel": "from executor.kinds import db_postgres\n"
    "db_postgres.PostgresSession.cancel = lambda self: None\n",
    "sqlite cancel": "from executor.kinds import db_sqlite\n"
    "db_sqlite.SqliteSession.cancel = lambda self: None\n",
}


def switch_off(monkeypatch, *guards: str) -> None:
    """Guards of issue 41, switched off in the db processes, for the sabotage tests."""
    for guard in guards:
        in_db_process(monkeypatch, GUARDS_OFF[guard])


def switch_off_extended_protocol_here(monkeypatch) -> None:
    """EXTENDED_PROTOCOL_OFF in this process, for the sessions a test opens itself."""
    execute = psycopg.RawCursor.execute

    def simple(self, query, params=None, *, prepare=None, binary=None):
        return execute(self, query, params, prepare=prepare)

    monkeypatch.setattr(psycopg.RawCursor, "execute", simple)
    monkeypatch.setattr(psycopg.Connection, "pipeline", lambda self: contextlib.nullcontext())
    monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    monkeypatch.setattr(PrepareManager, "get", lambda self, query, prepare=None: (Prepare.NO, b""))


# finish() of a run whose statement outlives it: the host's cancel ends it at once (a few
# seconds at worst); without it, finish() waits for the db process's broker (10 s) and then
# for its close (10 s) before the process is killed.
FINISH_BOUND_S = 8.0


def run_past_its_end(
    backend,
    place: Path,
    target: Target,
    code: str,
    *,
    sandbox_s: float = 3,
    while_stuck: Callable[[], list[str]] = list,
) -> tuple[RunResult, list[str]]:
    """A run whose sandbox ends (its wall time, a Stop, a crash) while a statement still runs.

    The session is opened for 600 s, the sandbox gets `sandbox_s`: the session's own time
    limits are out of play, so only the host's cancel can end the statement. Returns the
    sandbox's result and what is wrong: finish() not back within FINISH_BOUND_S, plus what
    `while_stuck` (e.g. the server's active statements) reports then.
    """
    found: list[str] = []
    with db.prepared(
        RunSpec(code=code),
        limits=Limits(wall_time_s=600, cpu_time_s=600),
        target=target,
        control_base=place,
        run_id="r1",
        allow_private=True,
        owner_uid=sandbox_host_uid(backend),
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
        finisher.join()  # bounded by the db process's own close
        if outcome and outcome[0].pending is not None:
            outcome[0].pending.undo()
    return result, found
