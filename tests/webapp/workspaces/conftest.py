"""Workspaces under a folder the sandbox's unprivileged host uid can traverse."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from tests.quota_mounts import unmount_under
from tests.webapp.runs.conftest import sandbox_backend, threads_runner  # noqa: F401

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def workspaces_root() -> Iterator[Path]:
    base = (REPO / "var" / "tmp").resolve()  # canonical: var/ may be a link (a worktree's)
    base.mkdir(parents=True, exist_ok=True)
    base = base.resolve()  # var/ may be a link (a worktree's): mount sources must be canonical
    base.chmod(0o711)
    root = Path(tempfile.mkdtemp(prefix="ws-", dir=base))
    root.chmod(0o711)
    with override_settings(
        UNDOABLE_WORKSPACES_ROOT=root,
        UNDOABLE_DB_PENDING_TIMEOUT_S=60,
        EXECUTOR_EGRESS_ALLOW_PRIVATE=True,
    ):
        yield root
    unmount_under(root)
    shutil.rmtree(root, ignore_errors=True)
