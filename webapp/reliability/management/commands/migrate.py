"""`manage.py migrate`: Django's, after setting up the state folder the database lives in.

Importing webapp.settings writes nothing. This is the set-up step instead, because every way
Undoable starts passes through it: `make run` (its `migrate`), docker-compose.yml's `migrate`
service, the tests' database (pytest-django migrates it) and their live servers. It makes
UNDOABLE_VAR_DIR and its folders private, generates the embedded install's secret key once and
gives the SQLite file its mode before SQLite first opens it. webapp.server.serve sets up the folders
too: a web container runs no migrate of its own.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.commands import migrate
from django.db import connections


def var_dir_setup() -> None:
    """UNDOABLE_VAR_DIR and the folders in it: created if missing, private either way."""
    var_dir = Path(settings.UNDOABLE_VAR_DIR)
    var_dir.mkdir(mode=0o711, parents=True, exist_ok=True)
    _private_folder(var_dir)
    # The agent sessions' folder (webapp.executor_glue.session_root), likewise.
    (var_dir / "sessions").mkdir(mode=0o711, exist_ok=True)
    _private_folder(var_dir / "sessions")
    Path(settings.STATIC_ROOT).mkdir(exist_ok=True)  # whitenoise serves from finders; empty is fine
    workspaces = Path(settings.UNDOABLE_WORKSPACES_ROOT)
    workspaces.mkdir(mode=0o711, parents=True, exist_ok=True)
    _private_folder(workspaces)


def secret_key_setup() -> None:
    """The embedded install's key (settings.EMBEDDED_SECRET_KEY_FILE, None when the key comes
    from DJANGO_SECRET_KEY): generated once, kept after, 0600 also when an older version left it
    readable."""
    path = settings.EMBEDDED_SECRET_KEY_FILE
    if path is None:
        return
    _private_file(path)
    if not path.read_text().strip():
        path.write_text(secrets.token_urlsafe(50))
    if not _current_secret_key():
        # This process imported the settings before there was a key; it signs with the new one
        # like every process that starts from now on.
        settings.SECRET_KEY = path.read_text().strip()


def audit_key_setup() -> None:
    """The embedded install's ledger key (settings.EMBEDDED_AUDIT_KEY_FILE, None when it comes
    from UNDOABLE_AUDIT_KEY or must): generated once, kept after, 0600."""
    path = settings.EMBEDDED_AUDIT_KEY_FILE
    if path is None:
        return
    _private_file(path)
    if not path.read_text().strip():
        path.write_text(secrets.token_urlsafe(50))


def sqlite_file_setup(database: str) -> None:
    """An SQLite database file is 0600 before SQLite opens it: SQLite gives its -wal, -shm and
    -journal files the database file's mode."""
    config = connections[database].settings_dict
    name = str(config.get("NAME") or "")
    if config["ENGINE"] != "django.db.backends.sqlite3" or name in ("", ":memory:"):
        return
    path = Path(name)
    if name.startswith("file:") or not path.parent.is_dir():
        return
    _private_file(path)
    for suffix in ("-wal", "-shm", "-journal"):
        if Path(f"{name}{suffix}").exists():
            os.chmod(f"{name}{suffix}", 0o600, follow_symlinks=False)


def _private_folder(folder: Path) -> None:
    # Traversable, not listable: sandboxes (another uid) reach the rootfs, workspaces and
    # session folders inside; nobody else may list it. Our own files in it are 0600.
    info = folder.stat()
    if info.st_mode & stat.S_ISVTX:
        raise ImproperlyConfigured(
            f"UNDOABLE_VAR_DIR {folder} is a shared folder (sticky bit): give Undoable its own"
        )
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != 0o711:
        folder.chmod(0o711)


def _private_file(path: Path) -> None:
    """Create `path` if missing, 0600 either way (also a file an older version left readable)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    os.chmod(path, 0o600, follow_symlinks=False)


def _current_secret_key() -> str:
    try:
        return str(settings.SECRET_KEY)
    except ImproperlyConfigured:  # Django's answer to an empty key
        return ""


class Command(migrate.Command):
    help = (
        "Set up UNDOABLE_VAR_DIR (folders, secret and audit keys, SQLite file), then "
        + migrate.Command.help
    )

    def execute(self, *args: Any, **options: Any) -> str | None:
        # Before the system checks, which open the database already (JSONField's does).
        var_dir_setup()
        secret_key_setup()
        audit_key_setup()
        sqlite_file_setup(options["database"])
        return super().execute(*args, **options)
