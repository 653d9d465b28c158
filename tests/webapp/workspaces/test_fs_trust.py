"""Issue 13's fs findings through the real web flow: embedded runner, real bwrap, Keep by service.

Each deny test is paired with a sabotage that switches its protection off and shows the same
check catching the breach.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from django.urls import reverse

from executor import quota
from executor.kinds import fs_apply, fs_listing, fs_tree, fs_walk
from tests.factories import QueryFactory
from tests.setuid_elf import STRANGER, euid_as_stranger
from webapp.queries.models import Query
from webapp.runs import runner, services
from webapp.runs.models import Run, RunStatus
from webapp.workspaces import services as ws
from webapp.workspaces.models import ChangeStatus, PendingChange

pytestmark = pytest.mark.usefixtures("threads_runner", "workspaces_root")


def finished(run: Run, timeout: float = 60.0) -> Run:
    assert runner.wait(run.pk, timeout), f"run {run.pk} did not finish"
    run.refresh_from_db()
    return run


def run_query(query: Query) -> tuple[Run, PendingChange]:
    """Run the fs query's forward code through the runner; its run and change."""
    run = finished(services.query_run(query=query))
    return run, PendingChange.objects.get(run=run)


def run_code(code: str, **query) -> tuple[Run, PendingChange]:
    return run_query(QueryFactory(kind="fs", forward_code=code, **query))


def keep(code: str, **query) -> Path:
    """Run `code` on a new fs query's workspace, Keep it; the workspace folder."""
    run, change = run_code(code, **query)
    assert change.status == ChangeStatus.PENDING, (run.error, change.message)
    ws.change_keep(change=change)
    return ws.workspace_for_query(run.query).root


def plant_setuid(elf: bytes) -> str:
    return (
        "import base64, os\n"
        f"open('whoami','wb').write(base64.b64decode({base64.b64encode(elf).decode()!r}))\n"
        "os.chmod('whoami', 0o4755)\n"
        "open('open.txt','w').write('anyone\\n')\n"
        "os.chmod('open.txt', 0o666)\n"
    )


def test_deny_a_kept_setuid_elf_runs_as_the_stranger_not_root(whoami_elf):
    root = keep(plant_setuid(whoami_elf))
    assert euid_as_stranger(root / "whoami") == str(STRANGER)
    for name in ("whoami", "open.txt"):
        st = (root / name).lstat()
        assert (st.st_mode & 0o7022, st.st_uid != 0) == (0, True)


@pytest.mark.sabotage
def test_sabotage_without_mask_and_owner_a_kept_setuid_elf_runs_as_root(whoami_elf, monkeypatch):
    monkeypatch.setattr(fs_tree, "kept_mode", lambda kind, mode: mode)
    monkeypatch.setattr(fs_apply, "effective_owner", lambda owner_uid: None)
    root = keep(plant_setuid(whoami_elf))
    assert euid_as_stranger(root / "whoami") == "0"


FIRST_LINK = (
    "import os\nos.mkdir('d')\nos.symlink('/'.join(['b'] * 20 + ['d'] + ['..'] * 21), 'a')\n"
)
SECOND_LINK = "import os\nos.symlink('.', 'b')\n"


def two_keeps() -> Path:
    query = QueryFactory(kind="fs", forward_code=FIRST_LINK)
    run, change = run_query(query)
    ws.change_keep(change=change)
    query.forward_code = SECOND_LINK
    query.save(update_fields=["forward_code"])
    run, change = run_query(query)
    ws.change_keep(change=change)
    return ws.workspace_for_query(query).root


def test_deny_the_two_step_link_escape_is_refused_at_the_second_keep():
    root = two_keeps()
    assert (root / "a").is_symlink() and not (root / "b").is_symlink()
    assert not os.path.exists(root / "a")


@pytest.mark.sabotage
def test_sabotage_without_the_final_tree_check_the_link_reaches_the_hosts_root(monkeypatch):
    monkeypatch.setattr(fs_tree, "escaping_links", lambda before, after, refused: {})
    assert os.path.samefile(two_keeps() / "a", "/")


NON_UTF8 = "open(b'bad\\xff.txt','w').write('x')\nopen('good.txt','w').write('ok')\n"


def test_deny_a_non_utf8_name_is_refused_and_the_panel_still_renders(owner, owner_client):
    run, change = run_code(NON_UTF8, owner=owner)
    assert [(c["path"], c["refused"]) for c in change.changes] == [
        ("bad\\xff.txt", "the name is not valid UTF-8"),
        ("good.txt", ""),
    ]
    panel = owner_client.get(reverse("workspaces:panel", args=[run.query_id]))
    assert panel.status_code == 200
    assert "bad\\xff.txt" in panel.content.decode()
    ws.change_keep(change=change)
    root = ws.workspace_for_query(run.query).root
    assert sorted(os.listdir(bytes(root))) == [b"good.txt"]
    download = owner_client.get(reverse("workspaces:download", args=[run.query_id]))
    assert download.status_code == 200


@pytest.mark.sabotage
def test_sabotage_without_escaping_a_non_utf8_name_breaks_the_panel(
    owner, owner_client, monkeypatch
):
    monkeypatch.setattr(fs_tree, "safe_text", lambda text: text)
    run, _ = run_code(NON_UTF8, owner=owner)
    with pytest.raises(UnicodeEncodeError):
        owner_client.get(reverse("workspaces:panel", args=[run.query_id]))


def deep(levels: int) -> str:
    return f"import os\nfor _ in range({levels}):\n    os.mkdir('d')\n    os.chdir('d')\n"


def test_deny_a_1100_deep_tree_is_refused_whole_and_the_workspace_stays_usable():
    query = QueryFactory(kind="fs", forward_code=deep(1_100))
    run, change = run_query(query)
    assert run.status == RunStatus.SUCCEEDED
    assert change.status == ChangeStatus.FAILED
    assert change.message == (
        "Nothing was kept: the run's workspace broke a cap (folders are nested more than 128 deep)."
    )
    query.forward_code = "open('next.txt','w').write('ok')\n"
    query.save(update_fields=["forward_code"])
    _, change = run_query(query)
    assert change.status == ChangeStatus.PENDING


@pytest.mark.sabotage
def test_sabotage_without_the_depth_cap_a_1100_deep_tree_awaits_keep(monkeypatch):
    monkeypatch.setattr(fs_walk, "MAX_DEPTH", 100_000)
    _, change = run_code(deep(1_100))
    assert change.status == ChangeStatus.PENDING
    ws.change_discard(change=change)


MANY = "import os\nfor i in range(10_000):\n    open(f'{i:05}.txt','w').write('y' * 1024)\n"


def test_deny_ten_thousand_files_are_stored_capped_and_kept_whole():
    run, change = run_code(MANY)
    assert len(change.changes) == 500
    assert change.message == "9,500 more changes not listed; diffs cut after 256 KiB."
    assert len(json.dumps(change.changes)) < 512 * 1024
    ws.change_keep(change=change)
    assert len(os.listdir(ws.workspace_for_query(run.query).root)) == 10_000


@pytest.mark.sabotage
def test_sabotage_without_the_listing_caps_the_row_holds_every_change(monkeypatch):
    monkeypatch.setattr(fs_listing, "MAX_LISTED_CHANGES", 10**9)
    monkeypatch.setattr(fs_listing, "MAX_DIFF_CHARS_TOTAL", 10**12)
    _, change = run_code(MANY)
    assert len(change.changes) == 10_000
    assert len(json.dumps(change.changes)) > 512 * 1024
    ws.change_discard(change=change)


FIFO = "import os\nos.mkfifo('pipe')\nopen('after.txt','w').write('x')\n"


def test_deny_a_fifo_is_refused_and_never_kept():
    run, change = run_code(FIFO)
    assert {c["path"]: c["refused"] for c in change.changes} == {
        "after.txt": "",
        "pipe": "special files (FIFOs, sockets, devices) are not kept",
    }
    ws.change_keep(change=change)
    assert os.listdir(ws.workspace_for_query(run.query).root) == ["after.txt"]


@pytest.mark.sabotage
def test_sabotage_without_the_special_file_check_the_fifo_is_offered(monkeypatch):
    monkeypatch.setattr(fs_tree, "_refusal", lambda rel, entry: "")
    _, change = run_code(FIFO)
    assert {c["path"]: c["refused"] for c in change.changes} == {"after.txt": "", "pipe": ""}
    ws.change_discard(change=change)


# 600 MiB in 15 MiB files (each under the 16 MiB file-size limit) against the 256 MiB quota.
FILL = (
    "import errno\n"
    "try:\n"
    "    for i in range(40):\n"
    "        open(f'big{i}', 'wb').write(b'x' * (15 << 20))\n"
    "except OSError as exc:\n"
    "    raise SystemExit(f'errno {errno.errorcode[exc.errno]}')\n"
)


def test_deny_a_run_past_the_workspace_quota_gets_enospc_and_the_host_is_fine():
    query = QueryFactory(kind="fs", forward_code=FILL)
    run, change = run_query(query)
    output = "".join(run.chunks.values_list("text", flat=True))
    assert "errno ENOSPC" in output
    assert change.status == ChangeStatus.FAILED
    state = ws.workspace_for_query(query).state_dir
    assert not quota.is_mounted(state / "pending")
    assert sorted(os.listdir(state)) == ["lock"]


@pytest.mark.sabotage
def test_sabotage_without_the_quota_mount_the_run_writes_600_mib(monkeypatch):
    monkeypatch.setattr(quota, "mount_tmpfs", lambda path, **caps: False)
    run, change = run_code(FILL)
    assert run.status == RunStatus.SUCCEEDED
    assert len(change.changes) == 40
    ws.change_discard(change=change)


def test_a_file_replaced_by_a_folder_is_kept():
    query = QueryFactory(kind="fs", forward_code="open('x','w').write('file')\n")
    run, change = run_query(query)
    ws.change_keep(change=change)
    query.forward_code = "import os\nos.remove('x')\nos.makedirs('x/y')\n"
    query.save(update_fields=["forward_code"])
    run, change = run_query(query)
    ws.change_keep(change=change)
    assert (ws.workspace_for_query(query).root / "x" / "y").is_dir()
