"""Fixtures shared across the whole test tree. Keep it small; suites add their own conftest."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]

# --- executor ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sandbox_rootfs() -> Path:
    """The sandbox root filesystem both backends run programs on (built by make)."""
    rootfs = REPO / "var" / "sandbox-rootfs"
    if not (rootfs / "etc" / "undoable-rootfs-built").exists():
        pytest.fail(f"no sandbox root filesystem in {rootfs}: run `make sandbox-rootfs`")
    return rootfs


@pytest.fixture(scope="session")
def docker_missing() -> Callable[[str], NoReturn]:
    """Call with a reason when Docker or the sandbox image is not there.

    CI sets UNDOABLE_REQUIRE_DOCKER=1 and then this fails loudly; elsewhere it skips, saying why.
    """

    def missing(reason: str) -> NoReturn:
        if os.environ.get("UNDOABLE_REQUIRE_DOCKER") == "1":
            pytest.fail(f"UNDOABLE_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(f"{reason} (set UNDOABLE_REQUIRE_DOCKER=1 to make this a failure)")

    return missing


# --- database ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """A file-based SQLite test database in a fresh folder instead of the in-memory one:
    runner threads and Celery worker processes must see the same committed rows, and a fresh
    folder means no WAL file of an earlier run can be mistaken for this one's."""
    import tempfile

    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        folder = Path(tempfile.mkdtemp(prefix="undoable-testdb-"))
        db.setdefault("TEST", {})["NAME"] = str(folder / "test.sqlite3")


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings) -> None:
    # PBKDF2's deliberate slowness buys nothing in tests; browser tests' servers keep it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
