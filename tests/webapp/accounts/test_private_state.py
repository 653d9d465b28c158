"""State files are private after start-up: the database (and its WAL), the secret key and the
folders other local users could list. Seen from a fresh interpreter started with umask 022."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.webapp.fresh_interpreter import probe_state

START = """
import json, os, stat
{sabotage}
os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
os.environ.pop("DATABASE_URL", None)
os.environ.pop("DJANGO_SECRET_KEY", None)
import django
django.setup()
from django.conf import settings
from django.core.management import call_command
from django.db import connection
call_command("migrate", verbosity=0)
with connection.cursor() as cursor:  # an open connection in WAL mode keeps -wal and -shm
    cursor.execute("INSERT INTO django_session VALUES ('k', 'data', '2999-01-01')")
var = settings.UNDOABLE_VAR_DIR
names = ["", "sessions", "workspaces", "secret-key", "db.sqlite3", "db.sqlite3-wal",
         "db.sqlite3-shm"]
print(json.dumps({{n: stat.S_IMODE(os.stat(var / n).st_mode) for n in names}}))
"""
PRIVATE = {
    "": 0o711,
    "sessions": 0o711,
    "workspaces": 0o711,
    "secret-key": 0o600,
    "db.sqlite3": 0o600,
    "db.sqlite3-wal": 0o600,
    "db.sqlite3-shm": 0o600,
}
NO_CHMOD = "import pathlib\nos.chmod = lambda *a, **k: None\npathlib.Path.chmod = os.chmod"


@pytest.fixture(autouse=True)
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def older_install(var: Path) -> None:
    """What an older version left: everything readable by every local uid."""
    var.mkdir(mode=0o755)
    for name in ("secret-key", "db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm"):
        (var / name).touch(mode=0o644)
    (var / "secret-key").write_text("an older install's key")
    for name in ("sessions", "workspaces"):
        (var / name).mkdir(mode=0o755)


def test_a_fresh_install_keeps_its_state_private(tmp_path):
    assert probe_state(START.format(sabotage=""), tmp_path / "var") == PRIVATE


def test_start_up_makes_an_older_installs_state_private(tmp_path):
    older_install(tmp_path / "var")

    assert probe_state(START.format(sabotage=""), tmp_path / "var") == PRIVATE
    assert (tmp_path / "var" / "secret-key").read_text() == "an older install's key"


@pytest.mark.sabotage
def test_sabotage_without_the_chmods_an_older_install_stays_readable(tmp_path):
    older_install(tmp_path / "var")

    modes = probe_state(START.format(sabotage=NO_CHMOD), tmp_path / "var")

    assert modes["db.sqlite3"] == modes["db.sqlite3-wal"] == modes["secret-key"] == 0o644
    assert modes[""] == 0o755
