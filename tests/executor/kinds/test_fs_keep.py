"""Keep applies like an installer: deny tests in real bwrap sandboxes, each with its sabotage.

A run proposes; the host applies. A setuid binary, group/world-writable modes, root-owned
files, FIFOs, non-UTF-8 names and links that escape (at once or in two Keeps) never reach the
workspace. Each sabotage switches one protection off and shows the same check catching it.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from executor.kinds import fs_apply, fs_tree
from executor.kinds.fs import FsOutcome, FsWorkspace, prepared
from executor.kinds.sandbox import sandbox_host_uid
from executor.result import RunResult
from executor.spec import RunSpec
from tests.setuid_elf import STRANGER, euid_as_stranger


def run_fs(
    backend, limits, workspace: FsWorkspace, code: str, *, run_id: str = "r1", quota_bytes=None
) -> tuple[RunResult, FsOutcome]:
    """The fs lifecycle as the web app drives it: prepare, run in bwrap, finish."""
    uid = sandbox_host_uid(backend)
    with prepared(
        RunSpec(code=code),
        limits=limits,
        workspace=workspace,
        run_id=run_id,
        uid=uid,
        quota_bytes=quota_bytes,
    ) as job:
        result = backend.run(job.spec, limits=job.limits, mounts=job.mounts)
        return result, job.finish(result)


def kept(backend, limits, workspace: FsWorkspace, code: str, run_id: str = "r1") -> FsOutcome:
    """Run `code` and Keep what it changed."""
    result, outcome = run_fs(backend, limits, workspace, code, run_id=run_id)
    assert result.ok, result.stderr
    assert outcome.pending is not None, outcome.message
    outcome.pending.keep()
    return outcome


@pytest.fixture
def workspace(place: Path) -> FsWorkspace:
    root = place / "files"
    root.mkdir()
    root.chmod(0o755)
    (root / "notes.txt").write_text("hello\n")
    return FsWorkspace(root, place / "state")


def plant_setuid(elf: bytes) -> str:
    return (
        "import base64, os\n"
        f"open('whoami','wb').write(base64.b64decode({base64.b64encode(elf).decode()!r}))\n"
        "os.chmod('whoami', 0o4755)\n"
        "os.mkdir('shared')\n"
        "os.chmod('shared', 0o3777)\n"
        "open('shared/open.txt','w').write('anyone\\n')\n"
        "os.chmod('shared/open.txt', 0o666)\n"
        "assert os.stat('whoami').st_mode & 0o4000, 'the sandbox could not set setuid'\n"
    )


def test_deny_keep_drops_setuid_and_writable_bits_and_root_ownership(
    backend, limits, workspace, whoami_elf
):
    outcome = kept(backend, limits, workspace, plant_setuid(whoami_elf))
    root = workspace.root
    assert euid_as_stranger(root / "whoami") == str(STRANGER)
    for rel in ("whoami", "shared", "shared/open.txt"):
        st = (root / rel).lstat()
        assert st.st_mode & 0o7022 == 0, (rel, oct(st.st_mode))
        assert st.st_uid == sandbox_host_uid(backend) != 0
    listed = {c.path: c for c in outcome.changes}
    assert (listed["whoami"].new_mode, listed["whoami"].note) == (
        0o755,
        "the run asked for mode 4755",
    )


@pytest.mark.sabotage
def test_sabotage_without_the_mask_or_the_owner_the_kept_elf_runs_as_root(
    backend, limits, workspace, whoami_elf, monkeypatch
):
    monkeypatch.setattr(fs_tree, "kept_mode", lambda kind, mode: mode)
    monkeypatch.setattr(fs_apply, "effective_owner", lambda owner_uid: None)
    kept(backend, limits, workspace, plant_setuid(whoami_elf))
    assert euid_as_stranger(workspace.root / "whoami") == "0"


@pytest.mark.sabotage
def test_sabotage_without_the_mask_setuid_and_world_write_bits_stay(
    backend, limits, workspace, whoami_elf, monkeypatch
):
    monkeypatch.setattr(fs_tree, "kept_mode", lambda kind, mode: mode)
    kept(backend, limits, workspace, plant_setuid(whoami_elf))
    assert (workspace.root / "whoami").lstat().st_mode & 0o4000
    assert (workspace.root / "shared/open.txt").lstat().st_mode & 0o022


@pytest.mark.sabotage
def test_sabotage_without_the_owner_kept_files_belong_to_root(
    backend, limits, workspace, whoami_elf, monkeypatch
):
    monkeypatch.setattr(fs_apply, "effective_owner", lambda owner_uid: None)
    kept(backend, limits, workspace, plant_setuid(whoami_elf))
    assert (workspace.root / "whoami").lstat().st_uid == 0


# Kept first: harmless while `b` does not exist. Twenty b's, each a hop through `b -> .`
# once it exists, then into the real folder `d` and enough `..` to climb to the host's `/`.
FIRST_LINK = (
    "import os\nos.mkdir('d')\nos.symlink('/'.join(['b'] * 20 + ['d'] + ['..'] * 21), 'a')\n"
)
SECOND_LINK = "import os\nos.symlink('.', 'b')\n"


def test_deny_a_link_that_makes_an_earlier_link_escape_is_refused(backend, limits, workspace):
    kept(backend, limits, workspace, FIRST_LINK, run_id="r1")
    assert (workspace.root / "a").is_symlink()
    result, outcome = run_fs(backend, limits, workspace, SECOND_LINK, run_id="r2")
    assert [(c.path, c.refused) for c in outcome.changes] == [
        ("b", "with it, the link 'a' would point outside the workspace")
    ]
    outcome.pending.keep()
    assert not (workspace.root / "b").is_symlink()
    assert not os.path.exists(workspace.root / "a")


@pytest.mark.sabotage
def test_sabotage_without_the_final_tree_check_the_two_links_reach_the_hosts_root(
    backend, limits, workspace, monkeypatch
):
    monkeypatch.setattr(fs_tree, "escaping_links", lambda before, after, refused: {})
    kept(backend, limits, workspace, FIRST_LINK, run_id="r1")
    kept(backend, limits, workspace, SECOND_LINK, run_id="r2")
    assert os.path.samefile(workspace.root / "a", "/")


NON_UTF8 = (
    "import os\n"
    "os.mkdir(b'caf\\xe9')\n"
    "open(b'caf\\xe9/menu.txt','w').write('soup\\n')\n"
    "open(b'bad\\xff.txt','w').write('x\\n')\n"
    "os.symlink(b'caf\\xe9', b'to-cafe')\n"
    "open('good.txt','w').write('fine\\n')\n"
)


def test_deny_non_utf8_names_are_refused_and_shown_escaped(backend, limits, workspace):
    result, outcome = run_fs(backend, limits, workspace, NON_UTF8)
    assert result.ok, result.stderr
    shown = [c.as_dict() for c in outcome.changes]
    text = json.dumps(shown, ensure_ascii=False).encode("utf-8").decode("utf-8")
    assert [(c["path"], bool(c["refused"])) for c in shown] == [
        ("bad\\xff.txt", True),
        ("caf\\xe9", True),
        ("caf\\xe9/menu.txt", True),
        ("good.txt", False),
        ("to-cafe", True),
    ]
    assert "the name is not valid UTF-8" in text
    assert "the link's target is not valid UTF-8" in text
    outcome.pending.keep()
    assert sorted(os.listdir(bytes(workspace.root))) == [b"good.txt", b"notes.txt"]


@pytest.mark.sabotage
def test_sabotage_without_escaping_a_non_utf8_name_breaks_json(
    backend, limits, workspace, monkeypatch
):
    monkeypatch.setattr(fs_tree, "safe_text", lambda text: text)
    _, outcome = run_fs(backend, limits, workspace, NON_UTF8)
    with pytest.raises(UnicodeEncodeError):
        json.dumps([c.as_dict() for c in outcome.changes], ensure_ascii=False).encode("utf-8")


@pytest.mark.sabotage
def test_sabotage_without_the_name_check_non_utf8_names_land_in_the_workspace(
    backend, limits, workspace, monkeypatch
):
    monkeypatch.setattr(fs_tree, "_is_utf8", lambda text: True)
    kept(backend, limits, workspace, NON_UTF8)
    assert b"bad\xff.txt" in os.listdir(bytes(workspace.root))


FIFO = "import os\nos.mkfifo('pipe')\nopen('after.txt','w').write('x')\n"


def test_deny_a_fifo_is_refused_and_never_kept(backend, limits, workspace):
    _, outcome = run_fs(backend, limits, workspace, FIFO)
    assert {c.path: c.refused for c in outcome.changes} == {
        "after.txt": "",
        "pipe": "special files (FIFOs, sockets, devices) are not kept",
    }
    outcome.pending.keep()
    assert not os.path.lexists(workspace.root / "pipe")
    assert (workspace.root / "after.txt").read_text() == "x"


@pytest.mark.sabotage
def test_sabotage_without_the_special_file_check_the_fifo_is_offered_for_keep(
    backend, limits, workspace, monkeypatch
):
    monkeypatch.setattr(fs_tree, "_refusal", lambda rel, entry: "")
    _, outcome = run_fs(backend, limits, workspace, FIFO)
    assert {c.path: c.refused for c in outcome.changes} == {"after.txt": "", "pipe": ""}
    with pytest.raises(OSError, match="refusing to write other 'pipe'"):
        outcome.pending.keep()


def test_a_hardlink_is_kept_as_a_file_of_its_own(backend, limits, workspace):
    code = "import os\nos.link('notes.txt', 'twin.txt')\n"
    kept(backend, limits, workspace, code)
    notes, twin = (workspace.root / "notes.txt").stat(), (workspace.root / "twin.txt").stat()
    assert (twin.st_nlink, notes.st_ino != twin.st_ino) == (1, True)
    assert stat.S_ISREG(twin.st_mode)
