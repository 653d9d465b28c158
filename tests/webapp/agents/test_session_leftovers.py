"""A server killed with sessions open leaves their quota tmpfs mounts and folders under
`UNDOABLE_VAR_DIR/sessions/<pid>`; the next server to start sessions removes those of dead
processes and leaves a live process's alone (issue 14: nothing a killed server held stays on the
host). Real tmpfs mounts: the tests run as root."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from executor import quota
from executor.sessions import manager
from tests.quota_mounts import unmount_under
from webapp.executor_glue import session_leftovers_remove


@pytest.fixture
def var_dir(tmp_path: Path) -> Iterator[Path]:
    with override_settings(UNDOABLE_VAR_DIR=tmp_path):
        yield tmp_path
    unmount_under(tmp_path)


@pytest.fixture
def live_process() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def leftover_session(var_dir: Path, pid: int) -> Path:
    workdir = var_dir / "sessions" / str(pid) / "a1b2c3" / "workspace"
    workdir.mkdir(parents=True)
    assert quota.mount_tmpfs(workdir, size_bytes=1 << 20, max_inodes=64)
    (workdir / "notes.txt").write_text("left behind")
    return workdir


def test_a_dead_servers_sessions_are_unmounted_and_removed(var_dir, live_process) -> None:
    gone = dead_pid()
    dead_workdir = leftover_session(var_dir, gone)
    live_workdir = leftover_session(var_dir, live_process.pid)

    assert session_leftovers_remove() == [gone]

    assert not quota.is_mounted(dead_workdir)
    assert not (var_dir / "sessions" / str(gone)).exists()
    assert quota.is_mounted(live_workdir)
    assert (live_workdir / "notes.txt").read_text() == "left behind"


@pytest.mark.sabotage
def test_sabotage_without_the_unmount_the_dead_servers_mount_stays(
    var_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = dead_pid()
    workdir = leftover_session(var_dir, gone)
    monkeypatch.setattr(manager.quota, "unmount", lambda path: None)

    assert session_leftovers_remove() == []

    assert quota.is_mounted(workdir)
