"""The fs kind in real bwrap sandboxes: Keep applies exactly, Undo leaves no trace."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from executor.kinds.errors import NothingPending, WorkspaceBusy, WorkspaceConflict
from executor.kinds.fs import FsWorkspace, prepared
from executor.kinds.sandbox import sandbox_host_uid
from executor.spec import RunSpec


def snapshot(root: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every entry under root with its full mode and content (or link target)."""
    seen: dict[str, tuple[int, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                body: bytes | str = os.readlink(path)
            elif stat.S_ISDIR(st.st_mode):
                body = "dir"
            else:
                body = path.read_bytes()
            seen[str(path.relative_to(root))] = (st.st_mode, body)
    return seen


@pytest.fixture
def workspace(place: Path) -> FsWorkspace:
    root = place / "files"
    root.mkdir()
    (root / "notes.txt").write_text("line one\nline two\n")
    (root / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "script.sh").chmod(0o750)
    (root / ".env").write_text("SECRET_LOOKING=1\n")
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "out.bin").write_bytes(bytes(range(256)))
    (root / "link-to-notes").symlink_to("notes.txt")
    return FsWorkspace(root, place / "state")


def forward(backend, limits, workspace: FsWorkspace, code: str, run_id: str = "r1"):
    """The fs lifecycle as the web app drives it: prepare, run, finish."""
    uid = sandbox_host_uid(backend)
    spec = RunSpec(code=code)
    with prepared(spec, limits=limits, workspace=workspace, run_id=run_id, uid=uid) as job:
        result = backend.run(job.spec, limits=job.limits, mounts=job.mounts)
        outcome = job.finish(result)
    return result, outcome.pending


def test_a_joke_written_then_undone_is_gone(backend, limits, workspace):
    before = snapshot(workspace.root)
    result, pending = forward(
        backend, limits, workspace, "open('joke.txt','w').write('knock knock\\n')"
    )
    assert result.ok, result.stderr
    changes = pending.changes()
    assert [(c.path, c.action) for c in changes] == [("joke.txt", "added")]
    assert "+knock knock" in changes[0].diff
    assert not (workspace.root / "joke.txt").exists()
    pending.undo()
    assert snapshot(workspace.root) == before
    assert workspace.pending() is None


def test_a_calculator_written_then_kept_is_present(backend, limits, workspace):
    code = (
        "import os\n"
        "open('calculator.py','w').write('print(2+2)\\n')\n"
        "os.chmod('calculator.py', 0o755)"
    )
    result, pending = forward(backend, limits, workspace, code)
    assert result.ok, result.stderr
    pending.keep()
    kept = workspace.root / "calculator.py"
    assert kept.read_text() == "print(2+2)\n"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o755
    assert workspace.pending() is None


def test_undo_restores_a_modified_and_a_deleted_file_byte_for_byte(backend, limits, workspace):
    before = snapshot(workspace.root)
    code = (
        "import os, shutil\n"
        "open('notes.txt','a').write('line three\\n')\n"
        "os.chmod('script.sh', 0o600)\n"
        "os.remove('.env')\n"
        "shutil.rmtree('build')\n"
    )
    result, pending = forward(backend, limits, workspace, code)
    assert result.ok, result.stderr
    listed = {(c.path, c.action) for c in pending.changes()}
    assert listed == {
        ("notes.txt", "modified"),
        ("script.sh", "modified"),
        (".env", "deleted"),
        ("build", "deleted"),
        ("build/out.bin", "deleted"),
    }
    pending.undo()
    assert snapshot(workspace.root) == before


def test_keep_applies_deletions_modes_and_hidden_files_exactly(backend, limits, workspace):
    code = (
        "import os, shutil\n"
        "open('notes.txt','a').write('line three\\n')\n"
        "os.chmod('script.sh', 0o600)\n"
        "os.remove('.env')\n"
        "shutil.rmtree('build')\n"
        "os.makedirs('build/cache')\n"
        "open('build/cache/.hidden','wb').write(b'\\x00\\x01')\n"
        "os.remove('link-to-notes')\n"
        "os.symlink('build/cache/.hidden', 'link-to-notes')\n"
    )
    result, pending = forward(backend, limits, workspace, code)
    assert result.ok, result.stderr
    expected = snapshot(pending.tree)
    pending.keep()
    assert snapshot(workspace.root) == expected


def test_writing_outside_the_workspace_is_refused_and_changes_nothing(backend, limits, workspace):
    before = snapshot(workspace.root)
    result, pending = forward(backend, limits, workspace, "open('../outside','w').write('x')")
    assert result.exit_code == 1
    assert "Read-only file system" in result.stderr
    assert pending is None
    assert snapshot(workspace.root) == before
    assert not (workspace.root.parent / "outside").exists()
    assert workspace.pending() is None


def test_a_link_out_of_the_workspace_reaches_only_the_sandbox_and_is_not_kept(
    backend, limits, workspace
):
    secret = workspace.root.parent / "host-secret.txt"
    secret.write_text("host only\n")
    code = (
        "import os\n"
        f"os.symlink({str(secret)!r}, 'escape')\n"
        "print(os.path.exists('escape'))\n"
        "os.symlink('.', 'here')\n"
        "os.symlink('here/..', 'up')\n"
    )
    result, pending = forward(backend, limits, workspace, code)
    assert result.ok, result.stderr
    assert result.stdout == "False\n"
    refused = {c.path: c.refused for c in pending.changes()}
    assert refused["escape"] and refused["up"] and not refused["here"]
    pending.keep()
    assert not (workspace.root / "escape").is_symlink()
    assert not (workspace.root / "up").is_symlink()
    assert (workspace.root / "here").is_symlink()


def test_a_failed_run_leaves_the_workspace_as_it_was(backend, limits, workspace):
    before = snapshot(workspace.root)
    code = "import os\nos.remove('notes.txt')\nopen('half.txt','w').write('x')\nraise SystemExit(3)"
    result, pending = forward(backend, limits, workspace, code)
    assert result.exit_code == 3
    assert pending is None
    assert snapshot(workspace.root) == before
    assert workspace.pending() is None


def test_a_second_run_on_a_held_workspace_is_refused(backend, limits, workspace):
    _, pending = forward(backend, limits, workspace, "open('a.txt','w').write('a')", "r1")
    with pytest.raises(WorkspaceBusy, match="r1"):
        forward(backend, limits, workspace, "open('b.txt','w').write('b')", "r2")
    pending.undo()
    with pytest.raises(NothingPending):
        pending.keep()


def test_keep_refuses_when_the_workspace_changed_meanwhile(backend, limits, workspace):
    _, pending = forward(backend, limits, workspace, "open('a.txt','w').write('a')")
    (workspace.root / "notes.txt").write_text("edited by hand\n")
    with pytest.raises(WorkspaceConflict):
        pending.keep()
    assert not (workspace.root / "a.txt").exists()


def test_keep_returns_the_changes_it_applied_with_their_diffs(backend, limits, workspace):
    _, pending = forward(backend, limits, workspace, "open('notes.txt','a').write('three\\n')")
    kept = pending.keep()
    assert [(c.path, c.action) for c in kept] == [("notes.txt", "modified")]
    assert "+three" in kept[0].diff
