"""On PostgreSQL, where the head's row lock orders the appends: processes with several threads
each append into one gapless chain, and an UPDATE in the database is named by audit_verify."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from tests.webapp.fresh_interpreter import ROOT
from tests.webapp.on_postgres import manage, postgres_env

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]

APPENDER = """
import threading
import django
django.setup()
from django.db import close_old_connections
from webapp.audit.services import audit_append

def append_some():
    try:
        for _ in range(10):
            audit_append(event="run", outcome="queued")
    finally:
        close_old_connections()

threads = [threading.Thread(target=append_some) for _ in range(3)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def test_processes_and_threads_append_one_gapless_chain_and_an_edit_is_named(
    postgres_server, postgres_app_template, tmp_path
):
    with postgres_server.database(copy_of=postgres_app_template.name) as database:
        env = postgres_env(database, tmp_path / "var")
        processes = [
            subprocess.Popen([sys.executable, "-c", APPENDER], env=env, cwd=ROOT) for _ in range(4)
        ]
        assert [process.wait(timeout=120) for process in processes] == [0] * 4
        with psycopg.connect(database.url, autocommit=True) as conn:
            seqs = [row[0] for row in conn.execute("SELECT seq FROM audit_auditentry ORDER BY seq")]
        assert seqs == list(range(1, 121))
        intact = manage(env, "audit_verify")
        assert intact.returncode == 0 and "intact: 120 entries" in intact.stdout, intact.stderr
        with psycopg.connect(database.url, autocommit=True) as conn:
            conn.execute("UPDATE audit_auditentry SET outcome = 'kept' WHERE seq = 77")
        broken = manage(env, "audit_verify")
        assert broken.returncode == 1 and "entry 77:" in broken.stderr, broken.stderr
