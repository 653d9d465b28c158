"""The environment a process of the web app runs in against a database of the session's
PostgreSQL (tests/servers.PostgresServer.database()): tests that must see PostgreSQL's own
locking, not SQLite's one writer at a time, start the app's processes (manage.py, pytest) with it.
"""

from __future__ import annotations

import os
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
