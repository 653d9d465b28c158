"""The ledger's key lives outside the database: migrate writes an embedded install's key to
var/ once (0600); a PostgreSQL install without UNDOABLE_AUDIT_KEY is refused at `check`, which
migrate runs before anything starts. Seen from fresh interpreters, as the settings are read."""

from __future__ import annotations

import subprocess
import sys

from tests.webapp.fresh_interpreter import ROOT, probe_state

SET_UP = """
import json, os, stat
os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
for name in ("DATABASE_URL", "UNDOABLE_AUDIT_KEY", "UNDOABLE_AUDIT_KEY_FILE"):
    os.environ.pop(name, None)
import django
django.setup()
from django.conf import settings
from django.core.management import call_command
call_command("migrate", verbosity=0, skip_checks=False)  # as manage.py runs it
from webapp.audit.keys import audit_key
key_file = settings.UNDOABLE_VAR_DIR / "audit-key"
print(json.dumps({
    "mode": stat.S_IMODE(os.stat(key_file).st_mode),
    "key": key_file.read_text(),
    "signs_with": audit_key().decode(),
}))
"""


def test_migrate_writes_an_embedded_installs_private_key_once(tmp_path):
    first = probe_state(SET_UP, tmp_path / "var")
    second = probe_state(SET_UP, tmp_path / "var")
    assert first["mode"] == second["mode"] == 0o600
    assert len(first["key"]) >= 50 and second["key"] == first["key"]
    assert first["signs_with"] == first["key"]


def check_with_postgres(tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "UNDOABLE_VAR_DIR": str(tmp_path / "var"),
        # Never reached: the checks that refuse run without a database connection.
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
        **env,
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--tag", "audit"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_deny_a_postgresql_install_without_a_key_is_refused_at_check(tmp_path):
    refused = check_with_postgres(tmp_path)
    assert refused.returncode != 0 and "audit.E001" in refused.stderr


def test_a_postgresql_install_with_a_key_passes_the_check(tmp_path):
    given = check_with_postgres(tmp_path, UNDOABLE_AUDIT_KEY="an-operators-key")
    assert given.returncode == 0, given.stderr
