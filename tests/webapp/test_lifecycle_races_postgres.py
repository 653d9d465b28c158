"""The lifecycle's races (test_lifecycle_races.py: every pair, and the sabotage that must give
two winners) again on PostgreSQL, the production database: the suite's SQLite lets one writer
at a time hold its file lock, so a read-then-write there can never interleave the way it does on
PostgreSQL. pytest runs that module in a process of its own whose DATABASE_URL names a database
of the session's PostgreSQL; its test database (`test_<name>`) is a copy of the session's
migrated one, which pytest-django takes as it is (--reuse-db) rather than migrating one again.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tests.servers import PostgresDatabase
from tests.webapp.fresh_interpreter import ROOT
from tests.webapp.on_postgres import postgres_env

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]

RACES = "tests/webapp/test_lifecycle_races.py"


def test_the_lifecycle_races_have_one_winner_and_the_sabotage_two_on_postgresql(
    postgres_server, postgres_app_template, tmp_path
):
    name = f"races_{uuid.uuid4().hex[:12]}"
    app_database = PostgresDatabase(name=name, url=postgres_server.database_url(name))
    with postgres_server.database(name=f"test_{name}", copy_of=postgres_app_template.name):
        done = subprocess.run(
            # -s -vv: Django names the test database it uses, which shows it is PostgreSQL's.
            [sys.executable, "-m", "pytest", "-s", "-vv", "-p", "no:cacheprovider", "--reuse-db"]
            + [RACES],
            cwd=ROOT,
            env=postgres_env(app_database, tmp_path / "var"),
            capture_output=True,
            text=True,
            timeout=540,
        )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert f"Using existing test database for alias 'default' ('test_{name}')" in output, output
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary, output
