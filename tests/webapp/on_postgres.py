"""The environment a process of the web app runs in against a database of the session's
PostgreSQL (tests/servers.PostgresServer.database()): tests that must see PostgreSQL's own
locking, not SQLite's one writer at a time, start the app's processes (manage.py, pytest) with it.

`manage.py migrate` on PostgreSQL takes many seconds, so it runs once per session, into the
database of `postgres_app_template` (tests/webapp/conftest.py); each test takes a copy of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.servers import PostgresDatabase
from tests.webapp.fresh_interpreter import ROOT


def postgres_env(database: PostgresDatabase, var_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": database.url,
        # With DATABASE_URL the ledger's key must be given (webapp/settings.py).
        "UNDOABLE_AUDIT_KEY": "a-key-outside-the-database",
        "UNDOABLE_VAR_DIR": str(var_dir),
    }


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`manage.py ARGS` in a process of its own, with `env`."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def migrate(database: PostgresDatabase, var_dir: Path) -> None:
    """The web app's tables in `database`, as `manage.py migrate` makes them in production."""
    migrated = manage(postgres_env(database, var_dir), "migrate", "--noinput", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
