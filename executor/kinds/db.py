"""The `db` kind: the code's database work stays in a transaction the host holds until Keep/Undo.

    with db.prepared(spec, limits=limits, target=SqliteTarget(ws, "app.db"), ...) as job:
        result = executor.run(job.spec, limits=job.limits, mounts=job.mounts)
        outcome = job.finish(result)
    outcome.pending.keep()   # or .undo(); nothing the program did can make this choice

The connection, and the broker that serves the sandbox's statements on it
(executor/kinds/db_broker.py), live on the host in a db process of the run's own
(executor/kinds/db_process.py), under its own limits; the sandbox gets a control
folder at /run/undoable with the broker's socket, the `db` client and the person's code. The
credential (a PostgreSQL or MariaDB/MySQL URL) never enters the sandbox: it is left out of the
environment.

SQLite: the host copies the workspace's database file into the workspace's private pending
folder (never mounted into a sandbox), holds the transaction on that copy, and on Keep
commits and installs the copy in place of the original (one file, mode 0644, the workspace
owner's), all through no-follow, directory-relative operations. Undo rolls back and drops it.
PostgreSQL, MariaDB and MySQL (the URL's scheme decides): the host connects to the checked
address of the URL's host (egress policy) and Keep commits, Undo rolls back. The sandbox's end
is not the transaction's end: the run is over once the program exits, and the change waits for
a decision without holding a sandbox.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.errors import ExecutorError
from executor.kinds import db_engines, db_process, db_slots, run_socket
from executor.kinds.db_broker import StatementLog
from executor.kinds.db_files import copy_database_out, install_database
from executor.kinds.db_process import ServedBroker
from executor.kinds.db_slots import DbCaps
from executor.kinds.errors import NothingPending, StatementFailed, TransactionError
from executor.kinds.fs import FsWorkspace, Reservation
from executor.kinds.job import Job
from executor.kinds.undo_check import UndoCheck, checked, file_digest
from executor.limits import Limits
from executor.policy.mounts import CONTROL_DIR, Mount
from executor.result import RunResult
from executor.spec import RunSpec, validate_relative_path

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_DB_BYTES = 256 * 1024 * 1024
_CLIENT = Path(__file__).with_name("db_client.py")
# The sandbox's program: the `db` client module from the control folder, then the code.
_RUNNER = (
    "import sys\n"
    f"sys.path.insert(0, {CONTROL_DIR!r})\n"
    "import undoable_db\n"
    "del sys.path[0]\n"
    f"undoable_db.run_program({CONTROL_DIR + '/user.py'!r})\n"
)


@dataclass(frozen=True)
class SqliteTarget:
    """A SQLite file at `path` (relative) in `workspace`; a missing file starts empty."""

    workspace: FsWorkspace
    path: str

    def __post_init__(self) -> None:
        validate_relative_path(self.path)


@dataclass(frozen=True)
class ServerTarget:
    """A database server's database; `url` is the credential's value and stays on the host.

    Its scheme picks the engine (db_engines.engine_for_url): postgresql:// (or a libpq
    connection string) is PostgreSQL, mysql:// or mariadb:// is MariaDB/MySQL.
    """

    url: str = field(repr=False)

    @property
    def engine(self) -> str:
        return db_engines.engine_for_url(self.url)


PostgresTarget = ServerTarget  # its name before the scheme chose the engine
Target = SqliteTarget | ServerTarget


class PendingDb:
    """A transaction the run left open on the host, until keep() or undo()."""

    def __init__(
        self,
        session: db_process.DbProcess,
        target: Target,
        reservation: Reservation | None,
        copy: Path | None,
        owner_uid: int | None,
        run_id: str = "",
        base_digest: str = "",
    ) -> None:
        self._session = session
        self._run_id = run_id
        # SQLite: the workspace's file when the run began (undo_check.file_digest).
        self.base_digest = base_digest
        self._target = target
        self._reservation = reservation
        self._copy = copy
        self._owner_uid = owner_uid
        self._lock = threading.Lock()
        self._open = True

    @property
    def open(self) -> bool:
        return self._open

    @property
    def session(self) -> db_process.DbProcess:
        return self._session

    def keep(self) -> None:
        """Commit; for SQLite, install the committed copy in the workspace."""
        with self._lock:
            self._check_open()
            try:
                self._session.commit()
                self._session.close()
                if isinstance(self._target, SqliteTarget) and self._copy is not None:
                    install_database(
                        self._target.workspace.root,
                        self._target.path,
                        self._copy,
                        owner_uid=self._owner_uid,
                    )
            except (StatementFailed, OSError) as exc:
                raise TransactionError(f"Keep failed: {exc}") from exc
            finally:
                self._end()
        logger.info("db change kept", extra={"engine": self._session.engine})

    def undo(self) -> UndoCheck | None:
        """Roll back; the database is as it was before the run. The returned check proves it
        (a mismatch is logged as an error): for SQLite the workspace's file when the run began
        and now, for PostgreSQL the tables the run touched (db_rollback_check); None for
        MariaDB, or when the rollback could not be read (logged)."""
        digests: dict[str, Any] | None = None
        with self._lock:
            self._check_open()
            if self._session.engine == "postgres":
                try:
                    digests = self._session.rollback_checked()
                    if digests is None:  # a rehearsal's verdict ended it, or a run was stopped
                        logger.info(
                            "db rollback not verified: the transaction had ended or was busy",
                            extra={"run_id": self._run_id},
                        )
                except ExecutorError as exc:  # rolled back all the same (by _end below)
                    logger.warning(
                        "db rollback not verified", extra={"run_id": self._run_id, "why": str(exc)}
                    )
            self._end()
        logger.info("db change undone", extra={"engine": self._session.engine})
        if digests is not None:
            return checked(
                digests["before"],
                digests["after"],
                what="rollback",
                run_id=self._run_id,
                tables=tuple(digests["tables"]),
            )
        if not isinstance(self._target, SqliteTarget):
            return None
        now = file_digest(self._target.workspace.root, self._target.path)
        return checked(self.base_digest, now, what="rollback", run_id=self._run_id)

    def _check_open(self) -> None:
        if not self._open:
            raise NothingPending("this transaction is not waiting for a decision any more")

    def _end(self) -> None:
        self._open = False
        with contextlib.suppress(Exception):
            self._session.close()  # rolls back whatever is still open
        if self._reservation is not None:
            self._reservation.release()


@dataclass
class DbOutcome:
    pending: PendingDb | None  # None: already rolled back (the run did not succeed)
    log: StatementLog
    message: str


class DbJob(Job):
    def __init__(
        self,
        spec: RunSpec,
        limits: Limits,
        mounts: tuple[Mount, ...],
        broker: ServedBroker,
        pending: PendingDb,
        program: _Program,
    ) -> None:
        super().__init__(spec, limits, mounts)
        self._broker = broker
        self._pending = pending
        self._program = program
        self.finished = False

    @property
    def session(self) -> db_process.DbProcess:
        """The db process holding the transaction (a rehearsal marks and compares states)."""
        return self._pending.session

    def then(self, spec: RunSpec) -> DbJob:
        """A job for another program on the same held transaction (a rehearsal's reverse
        program after its forward one): after finish() left the transaction open."""
        if not self.finished or not self._pending.open:
            raise RuntimeError("then() follows a finished job whose transaction is still open")
        return self._program.job(spec, self.limits, self._pending)

    def finish(self, result: RunResult | None) -> DbOutcome:
        """The sandbox ended: stop serving it; a successful run leaves its transaction open."""
        self.finished = True
        self._broker.stop()  # the statement in flight is cancelled first
        if self._broker.log.stopped is not None:
            self._pending.undo()
            message = f"The run was stopped: {self._broker.log.stopped}."
            return DbOutcome(None, self._broker.log, message)
        if result is None or not result.ok:
            self._pending.undo()
            message = "The run did not succeed; the transaction was rolled back."
            return DbOutcome(None, self._broker.log, message)
        return DbOutcome(self._pending, self._broker.log, "")


@dataclass(frozen=True)
class _Program:
    """What each program served on one held transaction needs: its control folder (the
    broker's socket, the client, the code), whom the socket admits, what env it never gets."""

    folder: Path
    owner_uid: int | None
    hide_env: tuple[str, ...]

    def job(self, spec: RunSpec, limits: Limits, pending: PendingDb) -> DbJob:
        broker = pending.session.serve(self.folder / "db.sock", uid=self.owner_uid)
        (self.folder / "user.py").write_text(spec.code)
        env = {k: v for k, v in spec.env.items() if k not in self.hide_env}
        runner = dataclasses.replace(spec, code=_RUNNER, language="python", env=env)
        return DbJob(runner, limits, (Mount(self.folder, CONTROL_DIR),), broker, pending, self)


@contextlib.contextmanager
def prepared(
    spec: RunSpec,
    *,
    limits: Limits,
    target: Target,
    control_base: Path,
    run_id: str,
    allow_private: bool = False,
    owner_uid: int | None = None,
    max_db_bytes: int = DEFAULT_MAX_DB_BYTES,
    hide_env: tuple[str, ...] = (),
    memory_mib: int = db_process.DEFAULT_MEMORY_MIB,
    caps: DbCaps | None = None,
    owner: str = "",
    repeatable_read: bool = False,
) -> Iterator[DbJob]:
    """Open the host's transaction and the broker; yield the sandbox's job.

    `hide_env` names environment variables the program must not get (the database
    credential). `owner_uid` is the sandbox's host uid (sandbox_host_uid(backend); None: this
    process's): only it can reach the control folder and the broker, and it owns the SQLite
    file Keep installs. The session runs in a db process of its own
    (executor/kinds/db_process.py) with `memory_mib` for its statements; `caps` (default: a slot
    folder in `control_base`) bounds how many such processes the host and `owner` hold at once.
    Leaving the block without `job.finish()` rolls back and frees everything.
    `repeatable_read`: PostgreSQL's transaction keeps one snapshot (a rehearsal's).
    """
    folder = run_socket.control_folder(control_base, prefix="db-", uid=owner_uid)
    reservation: Reservation | None = None
    session: db_process.DbProcess | None = None
    job: DbJob | None = None
    common = {"wall_time_s": limits.wall_time_s, "memory_bytes": memory_mib << 20}
    # First, before any copying: a full cap refuses the run at once (DbProcessesFull).
    slots = db_slots.acquire(caps or DbCaps(control_base / "db-slots"), owner)
    slots_handed = False
    try:
        copy: Path | None = None
        base_digest = ""
        if isinstance(target, SqliteTarget):
            # Room for the copy and its rollback journal, which can grow as large; SQLite's
            # temporary files (sorts that spill) go in the same folder and share it.
            quota_bytes = 2 * max_db_bytes + (1 << 20)
            reservation = target.workspace.reserve(run_id, quota_bytes=quota_bytes)
            copy = reservation.folder / "database.sqlite3"
            base_digest = file_digest(target.workspace.root, target.path)
            copy_database_out(target.workspace.root, target.path, copy)
            engine = "sqlite"
            opening = {
                "path": str(copy),
                "max_bytes": max_db_bytes,
                "quota_bytes": quota_bytes,
                "temp_dir": str(reservation.folder),
            }
        else:
            engine = target.engine
            opening = {"url": target.url, "allow_private": allow_private}
        slots_handed = True  # the db process frees them from now on, also when it fails
        if repeatable_read:
            opening["repeatable_read"] = True
        session = db_process.start(engine, common | opening, slots=slots)
        (folder / "undoable_db.py").write_text(_CLIENT.read_text())
        pending = PendingDb(session, target, reservation, copy, owner_uid, run_id, base_digest)
        program = _Program(folder, owner_uid, hide_env)
        job = program.job(spec, limits, pending)
        yield job
    finally:
        if job is None or not job.finished:
            if job is not None:
                job._broker.stop()
            if session is not None:
                with contextlib.suppress(Exception):
                    session.close()
            if reservation is not None:
                reservation.release()
        if not slots_handed:
            slots.release()
        shutil.rmtree(folder, ignore_errors=True)


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "DbJob",
    "DbOutcome",
    "PendingDb",
    "PostgresTarget",
    "ServerTarget",
    "SqliteTarget",
    "prepared",
]
