"""The lifecycle's races (test_lifecycle_races.py: every pair, and the sabotage that must give
two winners) again on PostgreSQL, the production database: the suite's SQLite lets one writer
at a time hold its file lock, so a read-then-write there can never interleave the way it does on
PostgreSQL. pytest runs that module in a process of its own whose DATABASE_URL is a fresh
database of the session's PostgreSQL (pytest-django makes its test database beside it).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.webapp.fresh_interpreter import ROOT
from tests.webapp.on_postgres import postgres_env

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]

RACES = "tests/webapp/test_lifecycle_races.py"


def test_the_lifecycle_races_have_one_winner_and_the_sabotage_two_on_postgresql(
    postgres_server, tmp_path
):
    with postgres_server.database() as database:
        done = subprocess.run(
            # -s -vv: Django names the test database it creates, which shows it is PostgreSQL's.
            [sys.executable, "-m", "pytest", "-s", "-vv", "-p", "no:cacheprovider", RACES],
            cwd=ROOT,
            env=postgres_env(database, tmp_path / "var"),
            capture_output=True,
            text=True,
            timeout=540,
        )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert f"Creating test database for alias 'default' ('test_{database.name}')" in output, output
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary, output
