"""Every tree shape a run can leave is survivable, and what the host stores of it is capped.

Deep trees, many files, a file turned folder, a full quota: the run ends with a clear message,
the workspace stays as it was and usable. Each cap has a sabotage that lifts it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from executor import quota
from executor.kinds import fs_listing, fs_walk
from executor.kinds.errors import WorkspaceBusy
from executor.kinds.fs import FsWorkspace, TreeTooLarge
from tests.executor.kinds.test_fs_keep import kept, run_fs


@pytest.fixture
def workspace(place: Path) -> FsWorkspace:
    root = place / "files"
    root.mkdir()
    root.chmod(0o755)
    (root / "notes.txt").write_text("hello\n")
    (root / "folder").mkdir()
    (root / "folder" / "inside.txt").write_text("in\n")
    return FsWorkspace(root, place / "state")


def deep(levels: int) -> str:
    return (
        "import os\n"
        f"for _ in range({levels}):\n"
        "    os.mkdir('d')\n"
        "    os.chdir('d')\n"
        "open('bottom.txt','w').write('x')\n"
    )


def files_in(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("levels", [1_100, 10_000])
def test_a_tree_deeper_than_the_cap_is_refused_whole_and_the_workspace_stays_usable(
    backend, limits, workspace, levels
):
    before = files_in(workspace.root)
    result, outcome = run_fs(backend, limits, workspace, deep(levels))
    assert result.ok, result.stderr
    assert (outcome.pending, outcome.changes) == (None, [])
    assert outcome.cap == "folders are nested more than 128 deep"
    assert outcome.cap in outcome.message
    assert workspace.pending() is None
    assert files_in(workspace.root) == before
    assert sorted(os.listdir(workspace.state_dir)) == ["lock"]
    kept(backend, limits, workspace, "open('next.txt','w').write('ok')\n", run_id="r2")
    assert (workspace.root / "next.txt").read_text() == "ok"


@pytest.mark.sabotage
def test_sabotage_without_the_depth_cap_a_1100_deep_tree_is_offered_for_keep(
    backend, limits, workspace, monkeypatch
):
    monkeypatch.setattr(fs_walk, "MAX_DEPTH", 100_000)
    _, outcome = run_fs(backend, limits, workspace, deep(1_100))
    assert outcome.pending is not None
    assert outcome.total == 1_101
    outcome.pending.undo()


def many_files(count: int, line: str = "x") -> str:
    return (
        "import os\nos.mkdir('many')\n"
        f"for i in range({count}):\n"
        f"    open(f'many/{{i:05}}.txt','w').write({line!r} + '\\n')\n"
    )


def test_ten_thousand_files_are_listed_capped_and_kept_whole(backend, limits, workspace):
    result, outcome = run_fs(backend, limits, workspace, many_files(10_000, "y" * 1024))
    assert result.ok, result.stderr
    assert (len(outcome.changes), outcome.total) == (500, 10_001)
    assert outcome.message == "9,501 more changes not listed; diffs cut after 256 KiB."
    assert sum(len(c.diff) for c in outcome.changes) <= 256 * 1024
    assert outcome.changes[-1].diff == ""
    outcome.pending.keep()
    assert len(os.listdir(workspace.root / "many")) == 10_000
    assert (workspace.root / "many" / "09999.txt").read_text() == "y" * 1024 + "\n"


@pytest.mark.sabotage
def test_sabotage_without_the_listing_caps_every_change_and_diff_is_stored(
    backend, limits, workspace, monkeypatch
):
    monkeypatch.setattr(fs_listing, "MAX_LISTED_CHANGES", 10**9)
    monkeypatch.setattr(fs_listing, "MAX_DIFF_CHARS_TOTAL", 10**12)
    _, outcome = run_fs(backend, limits, workspace, many_files(10_000, "y" * 1024))
    assert len(outcome.changes) == 10_001
    assert sum(len(c.diff) for c in outcome.changes) > 256 * 1024
    outcome.pending.undo()


def test_more_entries_than_the_cap_are_refused_whole(backend, limits, workspace):
    result, outcome = run_fs(backend, limits, workspace, many_files(20_010))
    assert result.ok, result.stderr
    assert outcome.pending is None
    assert outcome.cap == "it holds more than 20,000 files and folders"
    assert outcome.cap in outcome.message
    assert files_in(workspace.root) == ["folder", "folder/inside.txt", "notes.txt"]


@pytest.mark.sabotage
def test_sabotage_without_the_entry_cap_20010_files_are_offered_for_keep(
    backend, limits, workspace, monkeypatch
):
    monkeypatch.setattr(fs_walk, "MAX_ENTRIES", 10**9)
    _, outcome = run_fs(backend, limits, workspace, many_files(20_010))
    assert outcome.total == 20_011
    outcome.pending.undo()


def test_a_file_replaced_by_a_folder_and_back_is_kept_exactly(backend, limits, workspace):
    code = (
        "import os, shutil\n"
        "os.remove('notes.txt')\n"
        "os.makedirs('notes.txt/deeper')\n"
        "open('notes.txt/deeper/n.txt','w').write('n')\n"
        "shutil.rmtree('folder')\n"
        "open('folder','w').write('now a file')\n"
    )
    kept(backend, limits, workspace, code)
    assert (workspace.root / "notes.txt" / "deeper" / "n.txt").read_text() == "n"
    assert (workspace.root / "folder").read_text() == "now a file"


FILL = (
    "import errno\n"
    "try:\n"
    "    for i in range(6):\n"
    "        open(f'big{i}', 'wb').write(b'x' * (4 << 20))\n"
    "except OSError as exc:\n"
    "    raise SystemExit(f'errno {errno.errorcode[exc.errno]}')\n"
)


def test_a_run_that_fills_its_quota_gets_enospc_and_the_host_is_fine(backend, limits, workspace):
    result, outcome = run_fs(backend, limits, workspace, FILL, quota_bytes=8 << 20)
    assert "errno ENOSPC" in result.stderr
    assert (outcome.pending, outcome.message) == (None, "The run did not succeed; nothing changed.")
    assert not quota.is_mounted(workspace.pending_dir)
    assert sorted(os.listdir(workspace.state_dir)) == ["lock"]
    kept(backend, limits, workspace, "open('after.txt','w').write('ok')\n", run_id="r2")
    assert (workspace.root / "after.txt").read_text() == "ok"


@pytest.mark.sabotage
def test_sabotage_without_the_quota_mount_the_run_writes_past_it(
    backend, limits, workspace, monkeypatch
):
    monkeypatch.setattr(quota, "mount_tmpfs", lambda path, **caps: False)
    result, outcome = run_fs(backend, limits, workspace, FILL, quota_bytes=8 << 20)
    assert result.ok, result.stderr
    assert outcome.total == 6
    outcome.pending.undo()


def test_a_reservation_holds_the_workspace_without_a_copy_and_frees_it(workspace):
    with workspace.reserve("db-1", quota_bytes=1 << 20) as held:
        assert quota.is_mounted(held.pending_dir)
        assert stat.S_IMODE(held.folder.stat().st_mode) == 0o700
        assert not (held.pending_dir / "tree").exists()
        (held.folder / "database.sqlite3").write_bytes(b"copy")
        with pytest.raises(WorkspaceBusy, match="in use by run db-1"):
            workspace.begin("fs-2")
    held.release()
    assert sorted(os.listdir(workspace.state_dir)) == ["lock"]
    workspace.begin("fs-2").undo()


def test_a_workspace_past_the_caps_refuses_a_run_clearly_and_stays_free(workspace):
    folder = workspace.root
    for _ in range(130):
        folder = folder / "d"
        folder.mkdir()
    with pytest.raises(TreeTooLarge, match="too large for a run: folders are nested more than 128"):
        workspace.begin("r1")
    assert sorted(os.listdir(workspace.state_dir)) == ["lock"]
