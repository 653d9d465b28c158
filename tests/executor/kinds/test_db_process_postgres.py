"""PostgreSQL in the db process: its result buffers are the process's, and a dying server
takes the transaction with it (PostgreSQL rolls back when the connection ends)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from db_runs import in_db_process, run_db
from test_db_process import MIB, gone, rss

from executor.kinds.db import PostgresTarget
from tests.servers import PostgresDatabase, PostgresServer

pytestmark = pytest.mark.postgres
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def server(postgres_server: PostgresServer) -> Iterator[PostgresDatabase]:
    with postgres_server.database() as database:
        yield database


@pytest.fixture
def url(server: PostgresDatabase) -> str:
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS accounts")
        conn.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
        conn.execute("INSERT INTO accounts VALUES ('ana', 10), ('bo', 20)")
    return server.url


# One row of five 64 MB values: libpq holds the whole row before psycopg sees it.
WIDE_ROW = (
    "columns = ', '.join(\"repeat('x', 64 * 1024 * 1024)\" for _ in range(5))\n"
    "try:\n"
    "    print('ROWS', len(db.execute(f'SELECT {columns}')))\n"
    "except Exception as exc:\n"
    "    print('ERROR', exc)\n"
)


def buffer_breaches(backend, limits, place: Path, url: str) -> list[str]:
    before = rss("VmRSS:")
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
    result, outcome = run_db(
        backend, limits, place, PostgresTarget(url=url), WIDE_ROW, memory_mib=128
    )
    grown = rss("VmHWM:") - before
    if outcome.pending is not None:
        outcome.pending.undo()
    breaches = []
    if "memory limit (128 MiB)" not in result.stdout:
        breaches.append(f"no error naming the memory limit: {result.stdout[-300:]!r}")
    if grown > 100 * MIB:
        breaches.append(f"the server grew by {grown // MIB} MiB")
    return breaches


def test_deny_a_result_past_the_memory_limit_fails_in_the_db_process(backend, limits, place, url):
    assert buffer_breaches(backend, limits, place, url) == []


@pytest.mark.sabotage
def test_sabotage_without_the_memory_limit_the_result_is_buffered(
    backend, limits, place, url, monkeypatch
):
    in_db_process(
        monkeypatch,
        "from executor.kinds import db_child\ndb_child._limit_memory = lambda allowance: None\n",
    )
    assert buffer_breaches(backend, limits, place, url) != []


# A server that holds a pending change and dies: the db process must end with it.
SERVER = """
import sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests/executor/kinds"]
from executor.kinds import db, db_process
from executor.limits import Limits
from executor.spec import RunSpec
url, place, prelude = sys.argv[2:5]
db_process.CHILD_CODE = db_process.child_code(prelude)
with db.prepared(
    RunSpec(code="pass"), limits=Limits(wall_time_s=60, cpu_time_s=60),
    target=db.PostgresTarget(url=url), control_base=Path(place), run_id="r1", allow_private=True,
) as job:
    session = job._pending._session
    session.execute("UPDATE accounts SET balance = balance + 500")
    print(session.pid, flush=True)
    sys.stdin.read()  # hold the change until killed
"""


def death_breaches(place: Path, url: str, prelude: str = "") -> list[str]:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(REPO), url, str(place), prelude],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(server.stdout.readline())
    server.kill()
    server.wait()
    server.stdin.close()
    server.stdout.close()
    breaches = []
    if not gone(child, 10):
        breaches.append("the db process outlived the server")
        os.kill(child, 9)
    with psycopg.connect(url, autocommit=True) as conn:
        try:  # waits for the held transaction to end, at most 10 s
            conn.execute("SET lock_timeout = '10s'")
            with conn.transaction():
                conn.execute("LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE")
        except psycopg.errors.LockNotAvailable:
            breaches.append("the transaction was still held")
        balances = conn.execute("SELECT balance FROM accounts ORDER BY name").fetchall()
    if balances != [(10,), (20,)]:
        breaches.append(f"committed: {balances}")
    return breaches


def test_deny_a_dying_server_takes_its_db_processes_and_their_transactions(place, url):
    assert death_breaches(place, url) == []


@pytest.mark.sabotage
def test_sabotage_a_db_process_that_ignores_its_server_keeps_the_transaction(place, url):
    prelude = (
        "import threading\n"
        "from executor.kinds import db_child\n"
        "db_child._die_with = lambda parent: None\n"
        "db_child._parent_gone = lambda: threading.Event().wait()\n"
    )
    assert death_breaches(place, url, prelude) != []
