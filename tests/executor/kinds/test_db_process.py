"""The db kind's database work runs in a process of its own, under its own limits.

Each protection is shown twice: the attack against the real path (a sandboxed program, the
host's broker, the db process), and the same attack with the protection switched off in the
db process, where the check must fail.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sqlite3
import struct
import threading
from pathlib import Path

import pytest
from db_runs import in_db_process, run_db

from executor.kinds import db, db_process, db_slots
from executor.kinds.db import SqliteTarget
from executor.kinds.db_slots import DbCaps
from executor.kinds.db_values import Reply
from executor.kinds.errors import DbProcessesFull, StatementFailed, TransactionError
from executor.kinds.fs import FsWorkspace
from executor.spec import RunSpec

MIB = 1 << 20


def make_workspace(place: Path, name: str = "files") -> FsWorkspace:
    root = place / name
    root.mkdir()
    conn = sqlite3.connect(root / "app.db")
    with conn:
        conn.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
        conn.executemany("INSERT INTO accounts VALUES (?, ?)", [("ana", 10), ("bo", 20)])
    conn.close()
    return FsWorkspace(root, place / f"{name}-state")


def balances(workspace: FsWorkspace) -> list[tuple]:
    conn = sqlite3.connect(workspace.root / "app.db")
    try:
        return conn.execute("SELECT balance FROM accounts ORDER BY name").fetchall()
    finally:
        conn.close()


# Memory: 60 rows of 1 MB, each of 34 aggregates concatenating all of them, needs 2 GiB.
HUNGRY = (
    "aggregates = ', '.join(f'length(group_concat(t || {i}))' for i in range(34))\n"
    "try:\n"
    "    print('ROWS', db.execute(f'SELECT {aggregates} FROM big'))\n"
    "except Exception as exc:\n"
    "    print('ERROR', exc)\n"
)


def rss(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(field))


def memory_breaches(backend, limits, place: Path) -> list[str]:
    workspace = make_workspace(place)
    conn = sqlite3.connect(workspace.root / "app.db")
    with conn:
        conn.execute("CREATE TABLE big (t TEXT)")
        conn.execute(
            "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r LIMIT 60) "
            "INSERT INTO big SELECT hex(randomblob(512 * 1024)) FROM r"
        )
    conn.close()
    before = rss("VmRSS:")
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
    result, outcome = run_db(
        backend, limits, place, SqliteTarget(workspace, "app.db"), HUNGRY, memory_mib=256
    )
    grown = rss("VmHWM:") - before
    if outcome.pending is not None:
        outcome.pending.undo()
    breaches = []
    if "memory limit (256 MiB)" not in result.stdout:
        breaches.append(f"no error naming the memory limit: {result.stdout[-300:]!r}")
    if grown > 100 * MIB:
        breaches.append(f"the server grew by {grown // MIB} MiB")
    return breaches


def test_deny_a_statement_past_the_memory_limit_fails_and_the_server_does_not_grow(
    backend, limits, place
):
    assert memory_breaches(backend, limits, place) == []


@pytest.mark.sabotage
def test_sabotage_without_the_memory_limit_the_statement_runs(backend, limits, place, monkeypatch):
    in_db_process(
        monkeypatch,
        "from executor.kinds import db_child\ndb_child._limit_memory = lambda allowance: None\n",
    )
    assert memory_breaches(backend, limits, place) != []


# Temporary files: an ORDER BY over more rows than SQLite's cache spills to temp files.
def sort_code(rows: int) -> str:
    return (
        "try:\n"
        "    reply = db.execute('WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r "
        f"LIMIT {rows}) SELECT x FROM r ORDER BY randomblob(200)')\n"
        "    print('SORTED', len(reply))\n"
        "except Exception as exc:\n"
        "    print('ERROR', exc)\n"
    )


class Created:
    """Names created in folders while it is open (inotify): SQLite's temp files are unlinked
    at once, so only their creation shows."""

    IN_CREATE = 0x100

    def __init__(self, *folders: Path) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self._fd >= 0
        self._folders = {}
        for folder in folders:
            wd = self._libc.inotify_add_watch(self._fd, str(folder).encode(), self.IN_CREATE)
            assert wd >= 0, folder
            self._folders[wd] = folder

    def names(self) -> list[Path]:
        found = []
        try:
            while data := os.read(self._fd, 1 << 16):
                offset = 0
                while offset < len(data):
                    wd, _, _, size = struct.unpack_from("iIII", data, offset)
                    name = data[offset + 16 : offset + 16 + size].rstrip(b"\0").decode()
                    found.append(self._folders[wd] / name)
                    offset += 16 + size
        except BlockingIOError:
            pass
        os.close(self._fd)
        return found


def sort_breaches(backend, limits, place: Path) -> list[str]:
    workspace = make_workspace(place)
    target = SqliteTarget(workspace, "app.db")
    host_temp = [Path("/tmp"), Path("/var/tmp")]
    watch = Created(*host_temp)
    # 4 MiB database cap: 9 MiB of quota for the copy, its journal and the temporary files.
    big, outcome = run_db(backend, limits, place, target, sort_code(300_000), max_db_bytes=4 * MIB)
    outcome.pending.undo()
    small, outcome = run_db(backend, limits, place, target, sort_code(30_000), max_db_bytes=4 * MIB)
    outcome.pending.undo()
    spilled = [path for path in watch.names() if path.name.startswith("etilqs_")]
    breaches = [f"a temporary file on the host: {path}" for path in spilled]
    if "disk limit" not in big.stdout or "quota of 9 MiB" not in big.stdout:
        breaches.append(f"the big sort did not stop at the quota: {big.stdout[-300:]!r}")
    if "SORTED 10000" not in small.stdout:  # the reply's first 10,000 rows: it spilled, it ran
        breaches.append(f"the small sort failed: {small.stdout[-300:]!r}")
    return breaches


def test_deny_a_sort_spills_inside_the_runs_quota_and_stops_at_it(backend, limits, place):
    assert sort_breaches(backend, limits, place) == []


@pytest.mark.sabotage
def test_sabotage_without_the_temp_folder_a_sort_spills_onto_the_host(
    backend, limits, place, monkeypatch
):
    in_db_process(
        monkeypatch,
        "from executor.kinds import db_child\ndb_child._place_sqlite_temp_files = lambda f: None\n",
    )
    assert sort_breaches(backend, limits, place) != []


# The transaction lives and dies with the db process.
def test_a_killed_db_process_rolls_back_and_keep_says_so(backend, limits, place):
    workspace = make_workspace(place)
    code = "db.execute('UPDATE accounts SET balance = balance + 500')"
    result, outcome = run_db(backend, limits, place, SqliteTarget(workspace, "app.db"), code)
    assert result.ok, result.stderr
    os.kill(outcome.pending._session.pid, signal.SIGKILL)
    with pytest.raises(TransactionError, match="killed by SIGKILL.*rolled back"):
        outcome.pending.keep()
    assert balances(workspace) == [(10,), (20,)]
    assert workspace.pending() is None


def test_cancel_stops_the_running_statement_and_the_transaction_stays(place, limits):
    workspace = make_workspace(place)
    spec = RunSpec(code="pass")
    target = SqliteTarget(workspace, "app.db")
    with db.prepared(spec, limits=limits, target=target, control_base=place, run_id="r1") as job:
        session = job._pending._session
        failures: list[Exception] = []

        def endless() -> None:
            try:
                session.execute(
                    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                    "SELECT count(*) FROM r"
                )
            except StatementFailed as exc:
                failures.append(exc)

        worker = threading.Thread(target=endless)
        worker.start()
        while not failures and worker.is_alive():
            session.cancel()
            worker.join(0.05)
        worker.join()
        assert "interrupt" in str(failures[0])
        assert session.execute("SELECT count(*) FROM accounts").rows == [[2]]
        job.finish(None)


# How many db processes live at once: per person, per host.
def hold(place: Path, name: str, caps: DbCaps, owner: str, limits):
    workspace = make_workspace(place, name)
    return db.prepared(
        RunSpec(code="pass"),
        limits=limits,
        target=SqliteTarget(workspace, "app.db"),
        control_base=place,
        run_id=name,
        caps=caps,
        owner=owner,
    )


def cap_breaches(place: Path, limits) -> list[str]:
    caps = DbCaps(place / "slots", per_host=2, per_user=1)
    breaches = []
    with hold(place, "a1", caps, "ana", limits):
        try:
            with hold(place, "a2", caps, "ana", limits):
                breaches.append("a second db process for one person")
        except DbProcessesFull as exc:
            if "per person" not in str(exc):
                breaches.append(f"unclear: {exc}")
        with hold(place, "b1", caps, "bo", limits):
            try:
                with hold(place, "c1", caps, "cy", limits):
                    breaches.append("a third db process on a host capped at two")
            except DbProcessesFull as exc:
                if "on this server" not in str(exc):
                    breaches.append(f"unclear: {exc}")
    with hold(place, "a3", caps, "ana", limits):  # settled ones free their slots
        pass
    return breaches


def test_deny_the_caps_on_db_processes_give_a_clear_error(place, limits):
    assert cap_breaches(place, limits) == []


@pytest.mark.sabotage
def test_sabotage_without_the_caps_db_processes_pile_up(place, limits, monkeypatch):
    monkeypatch.setattr(db_slots, "acquire", lambda caps, owner: db_slots.Slots([]))
    assert cap_breaches(place, limits) != []


# The child is trusted, but the web process reads its answers as data: sizes and shapes capped.
HUGE_FRAME = (
    "import struct\n"
    "from executor.kinds import db_wire\n"
    "real_send = db_wire.send\n"
    "def send(sock, message, max_bytes):\n"
    "    if 'rows' in message:\n"
    "        sock.sendall(struct.pack('>I', 3 << 30))  # says 3 GiB follow\n"
    "        return\n"
    "    real_send(sock, message, max_bytes)\n"
    "db_wire.send = send\n"
)
BAD_SHAPE = (
    "from executor.kinds import db_values\n"
    "db_values.Reply.message = lambda reply: "
    "{'ok': True, 'columns': [1], 'rows': 'x', 'rowcount': 'y'}\n"
)


def reply_breaches(place: Path, limits) -> list[str]:
    workspace = make_workspace(place)
    target = SqliteTarget(workspace, "app.db")
    spec = RunSpec(code="pass")
    with db.prepared(spec, limits=limits, target=target, control_base=place, run_id="r1") as job:
        session = job._pending._session
        try:
            reply = session.execute("SELECT name FROM accounts")
        except StatementFailed as exc:
            if "database process" not in str(exc):
                return [f"unclear: {exc}"]
            return []
        finally:
            job.finish(None)
    return [f"taken as a reply: {reply}"]


@pytest.mark.parametrize("prelude", [HUGE_FRAME, BAD_SHAPE], ids=["huge-frame", "bad-shape"])
def test_deny_an_answer_past_its_cap_or_out_of_shape_ends_the_session(
    place, limits, monkeypatch, prelude
):
    in_db_process(monkeypatch, prelude)
    assert reply_breaches(place, limits) == []


@pytest.mark.sabotage
def test_sabotage_without_the_shape_check_a_malformed_answer_is_taken(place, limits, monkeypatch):
    in_db_process(monkeypatch, BAD_SHAPE)
    fields = ("columns", "rows", "rowcount", "truncated", "lastrowid")
    monkeypatch.setattr(db_process, "_reply", lambda raw: Reply(**{k: raw.get(k) for k in fields}))
    assert reply_breaches(place, limits) != []


# PR_SET_PDEATHSIG fires when the thread that started the child ends: a worker thread that
# starts a run and ends must not take the pending change's db process with it.
def thread_breaches(place: Path, limits) -> list[str]:
    workspace = make_workspace(place)
    started: dict = {}

    def start_run() -> None:
        block = db.prepared(
            RunSpec(code="pass"),
            limits=limits,
            target=SqliteTarget(workspace, "app.db"),
            control_base=place,
            run_id="r1",
        )
        started.update(block=block, job=block.__enter__())

    worker = threading.Thread(target=start_run)
    worker.start()
    worker.join()
    job = started["job"]
    session = job._pending._session
    try:
        if gone(session.pid, 2):  # the kill comes as the thread ends: wait for it a while
            return ["the db process died with the thread that started it"]
        session.execute("SELECT count(*) FROM accounts")
        return []
    finally:
        job.finish(None)
        started["block"].__exit__(None, None, None)


def gone(pid: int, timeout_s: float) -> bool:
    """Whether process `pid` ends within `timeout_s` (waits on a pidfd: no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def test_deny_a_db_process_outlives_the_thread_that_started_it(place, limits):
    assert thread_breaches(place, limits) == []


@pytest.mark.sabotage
def test_sabotage_started_from_the_calling_thread_it_dies_with_it(place, limits, monkeypatch):
    monkeypatch.setattr(
        db_process._Spawner, "take", lambda self: db_process._Child(db_process.CHILD_CODE)
    )
    assert thread_breaches(place, limits) != []


def test_a_request_too_large_for_the_db_process_fails_alone(place, limits):
    workspace = make_workspace(place)
    target = SqliteTarget(workspace, "app.db")
    spec = RunSpec(code="pass")
    with db.prepared(spec, limits=limits, target=target, control_base=place, run_id="r1") as job:
        session = job._pending._session
        with pytest.raises(StatementFailed, match="over the .*-byte cap"):
            session.execute("SELECT length(?)", ["x" * (9 * MIB)])
        assert session.execute("SELECT count(*) FROM accounts").rows == [[2]]
        job.finish(None)
