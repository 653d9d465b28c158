"""Request bodies on the real server (`python -m webapp.server.serve`, issue 41): a body too large
is answered 413 in a way a client that writes its whole body first still reads; a stranger's body
is answered 401 from the request head, never read; an upload past its cap is refused before a
byte of it is stored; and thousands of connections trickling bodies from a few addresses leave
/healthz and an authenticated exec answering."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import requests

from tests.webapp.live_server import (  # noqa: F401 (a fixture)
    LiveServer,
    server_process,
    serving,
    template_fixture,
)
from tests.webapp.trickle import Tally, Trickle
from webapp.rlimits import open_files_limit_raise
from webapp.workspaces.uploads import MAX_UPLOAD_REQUEST_BYTES

FILES = (1024, 8192)
MB = 1_000_000
MIB = 1024 * 1024
UNGUARDED = "tests.webapp.unguarded_asgi:application"


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def urllib_status(url: str, body: bytes, headers: dict[str, str], method: str = "POST"):
    """The status urllib reads for `body` sent to `url` (urllib writes the whole body before it
    reads, and asks for `Connection: close`), or the name of the error it met instead."""
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError as exc:
        return type(exc.reason).__name__
    except OSError as exc:
        return type(exc).__name__


def requests_status(url: str, body: bytes, headers: dict[str, str]) -> int | str:
    try:
        return requests.post(url, data=body, headers=headers, timeout=60).status_code
    except requests.RequestException as exc:
        return type(exc).__name__


def too_large_answers(url: str, token: str) -> dict[str, int | str]:
    """What write-first clients read for bodies past their routes' caps."""
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    code_5mb = json.dumps({"code": "#" * (5 * MB)}).encode()
    body_50mb = b"x" * (50 * MB)
    return {
        "exec 5 MB of code, urllib": urllib_status(url + "/api/v1/exec", code_5mb, auth),
        "exec 50 MB, urllib": urllib_status(url + "/api/v1/exec", body_50mb, auth),
        "exec 50 MB, requests": requests_status(url + "/api/v1/exec", body_50mb, auth),
        "session file 40 MB, urllib": urllib_status(
            url + "/api/v1/sessions/no-such-session/files/big", b"x" * (40 * MB), auth, "PUT"
        ),
        "page JSON 50 MB, urllib": urllib_status(
            url + "/queries/1/save", body_50mb, {"Content-Type": "application/json"}
        ),
    }


def test_bodies_past_their_caps_are_read_as_413_by_clients_that_write_first(template, tmp_path):
    with serving(template, tmp_path, open_files=FILES) as url:
        answers = too_large_answers(url, template.token)
    assert set(answers.values()) == {413}, answers


@pytest.mark.sabotage
def test_sabotage_closing_at_once_after_an_early_answer_resets_write_first_clients(
    template, tmp_path
):
    env = {"UNDOABLE_TEST_SABOTAGE": "close-at-once"}
    with serving(
        template, tmp_path, open_files=FILES, module="tests.webapp.serve_sabotaged", env=env
    ) as url:
        answers = too_large_answers(url, template.token)
    assert set(answers.values()) != {413}, answers


def head_answer(url: str, head: bytes, *, wait_s: float = 5.0) -> int | None:
    """The status of the answer to `head` sent alone (not a byte of its body), or None if none
    came within `wait_s`."""
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=wait_s) as sock:
        sock.sendall(head)
        received = b""
        try:
            while b"\r\n" not in received:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                received += chunk
        except TimeoutError:
            return None
    return int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/1.1 ") else None


def head(method: str, path: str, length: int, token: str | None = None) -> bytes:
    auth = b"" if token is None else b"Authorization: Bearer %s\r\n" % token.encode()
    return b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: %d\r\n\r\n" % (
        method.encode(),
        path.encode(),
        auth,
        length,
    )


def answers_to_heads_alone(url: str, token: str) -> dict[str, int | None]:
    return {
        "exec, no token, 50 MB": head_answer(url, head("POST", "/api/v1/exec", 50 * MB)),
        "exec, bad token, 1 MB": head_answer(url, head("POST", "/api/v1/exec", MB, "udb_no")),
        "session file, bad token, 30 MB": head_answer(
            url, head("PUT", "/api/v1/sessions/s/files/f", 30 * MB, "udb_no")
        ),
        "exec, token, 50 MB": head_answer(url, head("POST", "/api/v1/exec", 50 * MB, token)),
        "session file, token, 40 MB": head_answer(
            url, head("PUT", "/api/v1/sessions/s/files/f", 40 * MB, token)
        ),
        "upload, 400 MiB": head_answer(
            url, head("POST", "/workspaces/queries/1/upload", 400 * MIB)
        ),
    }


HEADS_ANSWERED = {
    "exec, no token, 50 MB": 401,
    "exec, bad token, 1 MB": 401,
    "session file, bad token, 30 MB": 401,
    "exec, token, 50 MB": 413,
    "session file, token, 40 MB": 413,
    "upload, 400 MiB": 413,
}


def test_strangers_and_bodies_declared_too_large_are_answered_before_a_byte_of_body(
    template, tmp_path
):
    with serving(template, tmp_path, open_files=FILES) as url:
        answers = answers_to_heads_alone(url, template.token)
    assert answers == HEADS_ANSWERED


@pytest.mark.sabotage
def test_sabotage_without_the_guard_strangers_bodies_are_waited_for(template, tmp_path):
    with serving(template, tmp_path, UNGUARDED, open_files=FILES) as url:
        answers = answers_to_heads_alone(url, template.token)
    assert answers != HEADS_ANSWERED, answers


def spooled_bytes(pid: int, folder: Path) -> int:
    """Bytes the server holds in files under `folder`, its temporary directory: the ones it
    unlinked at once (Django's spooled uploads) included."""
    total = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(folder)):
                total += os.stat(f"/proc/{pid}/fd/{fd}").st_size
        except FileNotFoundError:
            continue
    return total + sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


UPLOAD_HEAD = (
    b"POST /workspaces/queries/1/upload HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: multipart/form-data; boundary=b\r\n"
)


def upload_sent(server: LiveServer, spool: Path, head: bytes, pieces: list[bytes]):
    """`head`, its answer awaited for a moment, then `pieces` sent one after another as long as
    the server takes them; (the answer's status or None, the most the server had spooled at
    any point)."""
    most = 0
    with socket.create_connection(("127.0.0.1", port_of(server.url)), timeout=5) as sock:
        sock.sendall(head)
        sock.settimeout(2)
        try:
            answer = sock.recv(4096)
        except TimeoutError:
            answer = b""
        try:
            for piece in pieces:
                sock.sendall(piece)
                most = max(most, spooled_bytes(server.pid, spool))
        except OSError:
            pass  # the server closed the connection: it takes no more
        sock.settimeout(5)
        with contextlib.suppress(OSError):
            answer = answer or sock.recv(4096)
        most = max(most, spooled_bytes(server.pid, spool))
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None
    return status, most


def declared_upload(server: LiveServer, spool: Path) -> tuple[int | None, int]:
    """A 400 MiB upload declared by its Content-Length; 16 MiB of it sent."""
    return upload_sent(
        server, spool, UPLOAD_HEAD + b"Content-Length: %d\r\n\r\n" % (400 * MIB), [b"x" * MIB] * 16
    )


def chunked_upload(server: LiveServer, spool: Path) -> tuple[int | None, int]:
    """An upload of 80 MiB sent in chunks, with no length declared."""
    chunk = b"%x\r\n%s\r\n" % (MIB, b"x" * MIB)
    head = UPLOAD_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    return upload_sent(server, spool, head, [chunk] * 80 + [b"0\r\n\r\n"])


def test_an_upload_past_its_cap_is_refused_before_a_byte_is_spooled(template, tmp_path):
    spool = tmp_path / "server-tmp"
    spool.mkdir()
    with server_process(template, tmp_path, open_files=FILES, env={"TMPDIR": str(spool)}) as srv:
        declared = declared_upload(srv, spool)
        chunked_status, chunked_most = chunked_upload(srv, spool)
    assert declared == (413, 0)
    assert chunked_status == 413 and chunked_most <= MAX_UPLOAD_REQUEST_BYTES, chunked_most


@pytest.mark.sabotage
def test_sabotage_without_the_guard_an_upload_is_spooled_past_its_cap(template, tmp_path):
    spool = tmp_path / "server-tmp"
    spool.mkdir()
    with server_process(
        template, tmp_path, UNGUARDED, open_files=FILES, env={"TMPDIR": str(spool)}
    ) as srv:
        declared = declared_upload(srv, spool)
        chunked_status, chunked_most = chunked_upload(srv, spool)
    assert declared[0] != 413 and declared[1] > 0, declared
    assert chunked_most > MAX_UPLOAD_REQUEST_BYTES, (chunked_status, chunked_most)


@pytest.fixture
def many_files() -> None:
    open_files_limit_raise()  # this process's end of each hostile connection is a descriptor


HOSTILE = 4096
HOSTILE_ADDRESSES = 8  # 127.0.0.2 to 127.0.0.9: 512 connections each, twice the cap per address
TRICKLE_EVERY_S = 2.0
TRICKLE_FOR_S = 30.0  # past the 20 s a body has before the minimum rate applies
PROBE_EVERY_S = 0.5
EXEC_EVERY = 4  # probes


def hostile_heads() -> list[bytes]:
    """Bodies of 4 MB promised, without a token, with a bad one, and to a page (the login form)."""
    kinds = [
        head("POST", "/api/v1/exec", 4 * MB),
        head("POST", "/api/v1/exec", 4 * MB, "udb_not-a-token"),
        head("POST", "/accounts/login/", 4 * MB),
    ]
    return [kinds[n % len(kinds)] for n in range(HOSTILE)]


@dataclass
class Probes:
    statuses: Counter[tuple[str, int | str]]
    healthz_s: list[float]


def probed(url: str, token: str, duration_s: float) -> Probes:
    """/healthz every PROBE_EVERY_S, and an authenticated exec every EXEC_EVERY probes, from
    127.0.0.1, for `duration_s`."""
    probes = Probes(statuses=Counter(), healthz_s=[])
    pace = threading.Event()  # never set: the pause between probes
    close = {"Connection": "close"}
    auth = {**close, "Authorization": f"Bearer {token}"}
    ends = time.monotonic() + duration_s
    for n in itertools.count():
        if time.monotonic() >= ends:
            return probes
        started = time.monotonic()
        try:
            status: int | str = httpx.get(f"{url}/healthz", headers=close, timeout=10).status_code
        except httpx.TransportError as exc:
            status = type(exc).__name__
        probes.healthz_s.append(time.monotonic() - started)
        probes.statuses["healthz", status] += 1
        if n % EXEC_EVERY == 0:
            try:
                status = httpx.post(
                    f"{url}/api/v1/exec", json={"code": "print(6*7)"}, headers=auth, timeout=30
                ).status_code
            except httpx.TransportError as exc:
                status = type(exc).__name__
            probes.statuses["exec", status] += 1
        pace.wait(PROBE_EVERY_S)
    raise AssertionError("unreachable")


def under_trickle(url: str, token: str, duration_s: float) -> tuple[Probes, Tally]:
    trickle = Trickle(
        port_of(url), hostile_heads(), addresses=HOSTILE_ADDRESSES, every_s=TRICKLE_EVERY_S
    )
    trickle.start()
    try:
        assert trickle.all_opened.wait(60)
        probes = probed(url, token, duration_s)
    finally:
        tally = trickle.stop()
    return probes, tally


def test_4096_trickling_connections_leave_healthz_and_exec_answering(
    template, tmp_path, many_files
):
    """Hostile connections from 8 addresses promise 4 MB bodies and send a byte every 2 s:
    past 256 from one address they are refused at once; the API answers a missing or bad token
    401 from the head; a body to a page is cut off once it falls below the minimum rate. The
    probes from 127.0.0.1 all get 200 meanwhile, and no hostile connection lives past the body
    deadline."""
    with serving(template, tmp_path, open_files=FILES) as url:
        calm = probed(url, template.token, 5.0)
        probes, tally = under_trickle(url, template.token, TRICKLE_FOR_S)
    lifetimes = sorted(tally.closed_after_s)
    print(
        f"calm: healthz p50 {statistics.median(calm.healthz_s) * 1000:.1f} ms,",
        f"max {max(calm.healthz_s) * 1000:.1f} ms;",
        "trickle:",
        f"healthz p50 {statistics.median(probes.healthz_s) * 1000:.1f} ms,",
        f"max {max(probes.healthz_s) * 1000:.1f} ms over {len(probes.healthz_s)} probes;",
        f"hostile opened {tally.opened}, refused at once {tally.refused},",
        f"answered {dict(tally.answered)}, closed after p50 {statistics.median(lifetimes):.1f} s",
        f"max {lifetimes[-1]:.1f} s, oldest still open {tally.oldest_open_s:.1f} s",
    )
    assert {what for what, _ in probes.statuses} == {"healthz", "exec"}
    assert {status for _, status in probes.statuses} == {200}, probes.statuses
    assert tally.refused > 0 and set(tally.answered) == {401}, tally.answered
    assert max(lifetimes[-1], tally.oldest_open_s) < 28.0


@pytest.mark.sabotage
def test_sabotage_with_no_cap_per_address_the_trickle_takes_every_connection(
    template, tmp_path, many_files
):
    options = ("--max-connections-per-address", "0")
    with serving(template, tmp_path, *options, open_files=FILES) as url:
        probes, _ = under_trickle(url, template.token, 8.0)
    assert {status for _, status in probes.statuses} != {200}, probes.statuses
