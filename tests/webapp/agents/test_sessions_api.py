"""Stateful sessions over HTTP: state, tracebacks, files, bash, pip, ownership and caps."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import os
import zipfile
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from executor import quota
from tests.quota_mounts import WRITE_40_MIB, mounted_anywhere
from webapp.agents import session_services, sessions_api
from webapp.agents.models import AgentSession, ApiToken
from webapp.agents.session_services import session_manager

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("sessions")]


def start(persona) -> str:
    response = persona.post("/api/v1/sessions", {})
    assert response.status_code == 201
    return response.json()["id"]


def cell(persona, session_id: str, code: str, **extra) -> dict:
    response = persona.post(f"/api/v1/sessions/{session_id}/exec", {"code": code, **extra})
    assert response.status_code == 200, response.content
    return response.json()


def test_state_persists_across_twenty_cells(owner):
    sid = start(owner)
    cell(owner, sid, "import math\ntotal = 0\ndef bump(n):\n    global total\n    total += n")
    for n in range(1, 19):
        assert cell(owner, sid, f"bump({n})")["exit_code"] == 0
    assert cell(owner, sid, "total, math.factorial(5)")["stdout"] == "(171, 120)\n"


def test_a_traceback_does_not_wipe_state(owner):
    sid = start(owner)
    cell(owner, sid, "keep = [1, 2, 3]")
    failed = cell(owner, sid, "keep.append(4)\nundefined_name + 1")
    assert failed["exit_code"] == 1
    assert 'File "<cell 2>", line 2' in failed["stderr"]
    assert "NameError: name 'undefined_name' is not defined" in failed["stderr"]
    assert cell(owner, sid, "keep")["stdout"] == "[1, 2, 3, 4]\n"


def test_only_a_final_bare_expression_is_shown(owner):
    sid = start(owner)
    assert cell(owner, sid, "1 + 1\nx = 5\nx * 2")["stdout"] == "10\n"
    assert cell(owner, sid, "x = 7")["stdout"] == ""


def test_bash_commands_share_the_workspace(owner):
    sid = start(owner)
    cell(owner, sid, "open('made-by-python.txt', 'w').write('hi')")
    out = cell(owner, sid, "cat made-by-python.txt; echo from-bash > b.txt", language="bash")
    assert out["stdout"] == "hi"
    assert cell(owner, sid, "open('b.txt').read()")["stdout"] == "'from-bash\\n'\n"


def test_files_round_trip_byte_for_byte(owner):
    sid = start(owner)
    blob = bytes(range(256)) * 1000 + b"\x00\xff"
    assert owner.put(f"/api/v1/sessions/{sid}/files/deep/dir/blob.bin", blob).status_code == 200
    digest = hashlib.sha256(blob).hexdigest()
    seen = cell(
        owner,
        sid,
        "import hashlib; hashlib.sha256(open('deep/dir/blob.bin','rb').read()).hexdigest()",
    )
    assert seen["stdout"] == repr(digest) + "\n"
    cell(owner, sid, "open('deep/made.bin', 'wb').write(bytes(range(255, -1, -1)))")
    fetched = owner.get(f"/api/v1/sessions/{sid}/files/deep/made.bin")
    assert fetched.content == bytes(range(255, -1, -1))
    assert owner.get(f"/api/v1/sessions/{sid}/files/deep/dir/blob.bin").content == blob
    listing = owner.get(f"/api/v1/sessions/{sid}/files", path="deep").json()["entries"]
    assert [(e["name"], e["type"]) for e in listing] == [("dir", "dir"), ("made.bin", "file")]
    assert owner.delete(f"/api/v1/sessions/{sid}/files/deep").status_code == 204
    assert owner.get(f"/api/v1/sessions/{sid}/files").json()["entries"] == []


def test_a_symlink_planted_by_the_sandbox_is_not_followed(owner):
    sid = start(owner)
    cell(owner, sid, "import os; os.symlink('/etc/hostname', 'link'); os.symlink('/etc', 'etcdir')")
    link = owner.get(f"/api/v1/sessions/{sid}/files/link")
    assert (link.status_code, link.json()) == (
        404,
        {"error": "not a regular file: link (a symbolic link)"},
    )
    assert owner.get(f"/api/v1/sessions/{sid}/files/etcdir/hostname").status_code == 404
    assert owner.put(f"/api/v1/sessions/{sid}/files/etcdir/x", b"x").status_code == 400
    assert owner.put(f"/api/v1/sessions/{sid}/files/link", b"replaced").status_code == 200
    assert (
        cell(owner, sid, "import os; os.path.islink('link'), open('link').read()")["stdout"]
        == "(False, 'replaced')\n"
    )


@pytest.mark.parametrize("path", ["../escape", "a/../../b", "%2e%2e/x"])
def test_file_paths_that_climb_out_are_refused(owner, path):
    sid = start(owner)
    response = owner.put(f"/api/v1/sessions/{sid}/files/{path}", b"x")
    assert response.status_code in (400, 404)
    assert "error" in response.json()


def _upload_two_names_that_are_not_utf8(owner, sid: str) -> list[int]:
    # The server is handed each with U+FFFD for the bad byte: both would be one file.
    return [
        owner.put(f"/api/v1/sessions/{sid}/files/%FF.txt", b"first").status_code,
        owner.put(f"/api/v1/sessions/{sid}/files/%FE.txt", b"second").status_code,
    ]


def test_a_file_name_that_is_not_utf8_is_refused_and_replaces_nothing(owner):
    sid = start(owner)
    assert owner.put(f"/api/v1/sessions/{sid}/files/%C3%A9t%C3%A9.txt", b"kept").status_code == 200
    assert _upload_two_names_that_are_not_utf8(owner, sid) == [400, 400]
    refused = owner.get(f"/api/v1/sessions/{sid}/files/%FF.txt")
    assert refused.status_code == 400
    assert refused.json() == {"error": "file names must be UTF-8 (after %-unescaping)"}
    assert owner.delete(f"/api/v1/sessions/{sid}/files/%FF.txt").status_code == 400
    assert owner.get(f"/api/v1/sessions/{sid}/files", path=b"\xff").status_code == 400
    listing = owner.get(f"/api/v1/sessions/{sid}/files").json()["entries"]
    assert [e["name"] for e in listing] == ["\u00e9t\u00e9.txt"]


@pytest.mark.sabotage
def test_sabotage_unchecked_names_let_one_upload_replace_another(owner, monkeypatch):
    monkeypatch.setattr(sessions_api, "_names_in_utf8", lambda request: None)
    sid = start(owner)
    assert _upload_two_names_that_are_not_utf8(owner, sid) == [200, 200]
    # What the first upload asked to keep is gone.
    assert owner.get(f"/api/v1/sessions/{sid}/files/%FF.txt").content == b"second"


def test_a_strangers_token_gets_404_everywhere(owner, stranger):
    sid = start(owner)
    base = f"/api/v1/sessions/{sid}"
    assert stranger.post(f"{base}/exec", {"code": "1"}).status_code == 404
    assert stranger.get(f"{base}/files").status_code == 404
    assert stranger.get(f"{base}/files/x").status_code == 404
    assert stranger.put(f"{base}/files/x", b"x").status_code == 404
    assert stranger.delete(base).status_code == 404
    assert cell(owner, sid, "'still mine'")["stdout"] == "'still mine'\n"


def test_deleting_a_session_ends_it(owner):
    sid = start(owner)
    assert owner.delete(f"/api/v1/sessions/{sid}").status_code == 204
    assert owner.post(f"/api/v1/sessions/{sid}/exec", {"code": "1"}).status_code == 404
    assert AgentSession.objects.get(pk=sid).closed_at is not None


@override_settings(AGENTS_MAX_SESSIONS_PER_USER=2)
def test_a_user_has_a_cap_on_live_sessions(owner, stranger):
    first = start(owner)
    start(owner)
    denied = owner.post("/api/v1/sessions", {})
    assert denied.status_code == 429
    assert "at most 2 live sessions" in denied.json()["error"]
    assert stranger.post("/api/v1/sessions", {}).status_code == 201
    owner.delete(f"/api/v1/sessions/{first}")
    assert owner.post("/api/v1/sessions", {}).status_code == 201


def test_session_exec_validates_like_exec(owner):
    sid = start(owner)
    assert owner.post(f"/api/v1/sessions/{sid}/exec", {"code": 1}).status_code == 400
    bad = owner.post(f"/api/v1/sessions/{sid}/exec", {"code": "1", "timeout_s": 10**6})
    assert bad.status_code == 400


def test_a_cell_that_runs_too_long_is_stopped_and_the_session_lives_on(owner):
    sid = start(owner)
    cell(owner, sid, "before = 1")
    slow = cell(owner, sid, "import time\nwhile True: time.sleep(0.05)", timeout_s=1)
    assert slow["timed_out"] is True
    assert "TimeoutError" in slow["stderr"]
    assert cell(owner, sid, "before")["stdout"] == "1\n"


def tiny_wheel() -> bytes:
    """A pure-Python wheel built by hand, so installing it needs no network at all."""
    files = {
        "tinypkg/__init__.py": b"def hello():\n    return 'hello from tinypkg'\n",
        "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    record += "tinypkg-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("tinypkg-1.0.dist-info/RECORD", record)
    return buffer.getvalue()


def test_an_uploaded_wheel_installs_offline_and_imports_in_the_same_session(owner):
    sid = start(owner)
    assert cell(owner, sid, "import tinypkg")["exit_code"] == 1
    owner.put(f"/api/v1/sessions/{sid}/files/tinypkg-1.0-py3-none-any.whl", tiny_wheel())
    installed = cell(
        owner,
        sid,
        "python3 -m pip install tinypkg-1.0-py3-none-any.whl",
        language="bash",
        timeout_s=60,
    )
    assert installed["exit_code"] == 0, installed["stderr"]
    assert "Successfully installed tinypkg-1.0" in installed["stdout"]
    assert cell(owner, sid, "import tinypkg; tinypkg.hello()")["stdout"] == "'hello from tinypkg'\n"


@override_settings(AGENTS_SESSION_WORKDIR_QUOTA_MIB=16)
def test_a_cell_cannot_fill_the_host_past_the_workspace_quota(owner):
    sid = start(owner)
    workdir = session_manager().get(sid).workdir

    filled = cell(owner, sid, WRITE_40_MIB, timeout_s=30)

    assert filled["stdout"] == "ENOSPC No space left on device\n"
    assert os.path.getsize(os.path.join(workdir, "big")) <= 16 << 20
    assert owner.put(f"/api/v1/sessions/{sid}/files/more.bin", b"x" * (1 << 20)).status_code == 400
    assert cell(owner, sid, "'still answering'")["stdout"] == "'still answering'\n"
    assert owner.delete(f"/api/v1/sessions/{sid}").status_code == 204
    assert not mounted_anywhere(workdir)


@pytest.mark.sabotage
@override_settings(AGENTS_SESSION_WORKDIR_QUOTA_MIB=16)
def test_sabotage_without_the_quota_mount_a_cell_fills_the_host(owner, monkeypatch):
    monkeypatch.setattr(quota, "mount_tmpfs", lambda path, **caps: False)
    sid = start(owner)
    workdir = session_manager().get(sid).workdir

    filled = cell(owner, sid, WRITE_40_MIB, timeout_s=30)

    assert filled["stdout"] == "wrote it all\n"
    assert os.path.getsize(os.path.join(workdir, "big")) == 40 << 20


def _start_and_run(persona) -> int:
    """One agent's first moves: create a session, run one cell in it; the cell's status."""
    client_persona = make_persona_client(persona)
    response = client_persona.post("/api/v1/sessions", {})
    assert response.status_code == 201, response.content
    sid = response.json()["id"]
    return client_persona.post(f"/api/v1/sessions/{sid}/exec", {"code": "6 * 7"}).status_code


def make_persona_client(persona):
    """The same token on its own Client: one per thread, as separate agents would have."""
    return dataclasses.replace(persona, client=Client())


@override_settings(AGENTS_MAX_SESSIONS_PER_USER=32, AGENTS_MAX_CONCURRENT_PER_TOKEN=32)
def test_twenty_concurrent_creates_lose_no_session(owner):
    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(lambda _: _start_and_run(owner), range(20)))
    assert statuses == [200] * 20


def test_a_session_created_between_the_stale_checks_reads_is_not_closed(owner, monkeypatch):
    token = ApiToken.objects.get(owner=owner.user)
    inner: list[str] = []
    manager = session_manager()
    real_live_ids = manager.live_ids

    def live_ids_after_a_concurrent_create() -> list[str]:
        if not inner:  # a second request's create lands between the rows and the snapshot
            inner.append("")
            inner[0] = session_services.session_create(token=token).pk
        return real_live_ids()

    monkeypatch.setattr(manager, "live_ids", live_ids_after_a_concurrent_create)
    start(owner)
    assert cell(owner, inner[0], "1 + 1")["stdout"] == "2\n"


def test_sabotage_snapshot_then_rows_loses_the_session_created_in_between(owner, monkeypatch):
    def racy_close_stale(live, manager):  # the order before the fix
        held_here = set(manager.live_ids())
        between()
        stale = [
            pk
            for pk in live.filter(worker=session_services.worker_name()).values_list(
                "pk", flat=True
            )
            if pk not in held_here
        ]
        live.filter(pk__in=stale).update(closed_at=timezone.now())

    token = ApiToken.objects.get(owner=owner.user)
    inner: list[str] = []
    real_close_stale = session_services._close_stale

    def between() -> None:
        if not inner:
            monkeypatch.setattr(session_services, "_close_stale", real_close_stale)
            inner.append(session_services.session_create(token=token).pk)
            monkeypatch.setattr(session_services, "_close_stale", racy_close_stale)

    monkeypatch.setattr(session_services, "_close_stale", racy_close_stale)
    start(owner)
    lost = owner.post(f"/api/v1/sessions/{inner[0]}/exec", {"code": "1"})
    assert lost.status_code == 404
