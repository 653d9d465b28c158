"""Fixtures for the undoable kinds: one real bwrap backend, folders a sandbox can reach."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.backends.bwrap.backend import BwrapBackend
from executor.limits import Limits
from tests.quota_mounts import unmount_under

REPO = Path(__file__).resolve().parents[3]
ROOTFS = REPO / "var" / "sandbox-rootfs"


@pytest.fixture(scope="session")
def backend() -> Iterator[BwrapBackend]:
    bwrap = BwrapBackend(str(ROOTFS))
    bwrap.self_check()
    yield bwrap
    bwrap.close()


@pytest.fixture
def limits() -> Limits:
    return Limits(wall_time_s=20, cpu_time_s=20)


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder under var/tmp: bwrap runs as an unprivileged uid and pytest's tmp is 0700."""
    base = (REPO / "var" / "tmp").resolve()  # canonical: var/ may be a link (a worktree's)
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o711)
    folder = Path(tempfile.mkdtemp(prefix="kinds-", dir=base))
    folder.chmod(0o711)
    yield folder
    unmount_under(folder)
    shutil.rmtree(folder, ignore_errors=True)
