"""Importing the settings writes nothing; `manage.py migrate` (the set-up step every start passes
through) creates UNDOABLE_VAR_DIR and the embedded secret key once. Seen from fresh interpreters:
the test process has imported the settings long ago."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.webapp.fresh_interpreter import probe_state

IMPORT = """
import json, os
os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
for name in ("DATABASE_URL", "DJANGO_SECRET_KEY", "DJANGO_SECRET_KEY_FILE"):
    os.environ.pop(name, None)
import django
django.setup()
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
{sabotage}
try:
    key = settings.SECRET_KEY
except ImproperlyConfigured as exc:
    key = "refused: " + str(exc)
print(json.dumps({{"var_dir": str(settings.UNDOABLE_VAR_DIR), "key": key}}))
"""
# What settings did at import before: create the var dir (and its folders, and the key).
WRITES_AT_IMPORT = (
    "from webapp.reliability.management.commands.migrate import var_dir_setup\nvar_dir_setup()"
)

SET_UP = """
import json, os, stat
os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
for name in ("DATABASE_URL", "DJANGO_SECRET_KEY", "DJANGO_SECRET_KEY_FILE"):
    os.environ.pop(name, None)
{given_key}
import django
django.setup()
from django.conf import settings
from django.core.management import call_command
call_command("migrate", verbosity=0, skip_checks=False)  # as manage.py runs it
var = settings.UNDOABLE_VAR_DIR
key_file = var / "secret-key"
print(json.dumps({{
    "var_dir": stat.S_IMODE(os.stat(var).st_mode),
    "key_file": stat.S_IMODE(os.stat(key_file).st_mode) if key_file.exists() else None,
    "key": key_file.read_text() if key_file.exists() else None,
    "signs_with": settings.SECRET_KEY,
}}))
"""


def created_under(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def test_importing_the_settings_creates_nothing(tmp_path):
    state = probe_state(IMPORT.format(sabotage=""), tmp_path / "var")

    assert state["var_dir"] == str(tmp_path / "var")
    assert created_under(tmp_path) == []


@pytest.mark.sabotage
def test_sabotage_a_write_at_import_is_seen(tmp_path):
    probe_state(IMPORT.format(sabotage=WRITES_AT_IMPORT), tmp_path / "var")

    assert "var" in created_under(tmp_path)


def test_without_any_key_django_refuses_to_sign_rather_than_use_a_constant(tmp_path):
    state = probe_state(IMPORT.format(sabotage=""), tmp_path / "var")

    assert state["key"].startswith("refused: ")


def test_migrate_sets_up_the_var_dir_and_a_private_key_once(tmp_path):
    first = probe_state(SET_UP.format(given_key=""), tmp_path / "var")
    second = probe_state(SET_UP.format(given_key=""), tmp_path / "var")

    assert first["var_dir"] == second["var_dir"] == 0o711  # the sandbox uid traverses it
    assert first["key_file"] == second["key_file"] == 0o600
    assert len(first["key"]) >= 50
    assert second["key"] == first["key"]
    # The process that generated the key signs with it, as every later one does.
    assert first["signs_with"] == second["signs_with"] == first["key"]


def test_a_given_key_leaves_no_key_file(tmp_path):
    given = 'os.environ["DJANGO_SECRET_KEY"] = "a-key-of-the-operator"'

    state = probe_state(SET_UP.format(given_key=given), tmp_path / "var")

    assert state["key_file"] is None
    assert state["signs_with"] == "a-key-of-the-operator"
